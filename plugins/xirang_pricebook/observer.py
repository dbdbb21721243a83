"""Meter every finished training run into the cost store (``xirang cost report`` shows it).

The run is charged what its own cost policy quoted in the summary, to its project (and the team
``team=`` names, ``default`` otherwise). A run submitted to the pool (``scheduler=pool``) is not
charged here: the pool's metering charges the allocation it ran in, and charging both would bill
the same device time twice. A failure to record is reported on stderr but does not fail a run
that already trained and saved its results.

The run prices itself (its policy's quote, re-quoted with measured watts) and leaves what the
charge needs in :func:`xirang.launch.pending_charges`; the cost store records it when it next
opens. So a training run imports nothing of the pool service.

While the run trains, its device's power is sampled (:class:`~xirang_pricebook.energy.
PowerSampler`, at the loop's log steps, at most every 30 s) where the device plugin reads it
(NVML on NVIDIA GPUs); the charge's energy then uses the measured mean instead of the configured
``cost.watts``, and an energy-aware policy's amount is re-quoted with it. On the CPU, and on
devices without a reading, the configured watts stay.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

from xirang import replace_text
from xirang.launch import pending_charges
from xirang_pricebook.energy import MEASURED, PowerSampler, run_watts

#: the scheduler whose jobs the pool meters itself
POOL_SCHEDULER = "pool"
#: one sampler per run this process trains (keyed by run directory)
_SAMPLERS: dict[str, PowerSampler] = {}


def sample_power(ctx: Any) -> None:
    """Sample the run's device power (the first call creates the run's sampler)."""
    run_dir = str(getattr(ctx, "run_dir", ""))
    sampler = _SAMPLERS.get(run_dir)
    if sampler is None:
        sampler = _SAMPLERS[run_dir] = _sampler(ctx)
    sampler.sample()


def _sampler(ctx: Any) -> PowerSampler:
    """A sampler over the run's own device backend (one without a reading samples nothing)."""
    from xirang import get_registry

    config = getattr(ctx, "config", None) or {}
    try:
        backend = get_registry().create("device", config["device"])
    except Exception:  # no backend, no reading: the configured watts stay
        backend = None
    return PowerSampler(backend, getattr(getattr(ctx, "device", None), "index", None))


def record_run(ctx: Any, summary: dict[str, Any]) -> None:
    config = getattr(ctx, "config", None) or {}
    sampler = _SAMPLERS.pop(str(getattr(ctx, "run_dir", "")), None)
    if (config.get("scheduler") or {}).get("name") == POOL_SCHEDULER:
        return
    watts, amount = _energy(config, summary, sampler)
    charge = {
        "summary": summary,
        "config": {k: config[k] for k in ("project", "team", "runtime") if k in config},
        "end": time.time(),
        "watts": watts,
        "amount": amount,
    }
    try:
        folder = pending_charges()
        folder.mkdir(parents=True, exist_ok=True)
        replace_text(folder / f"{uuid.uuid4().hex}.json", json.dumps(charge, default=str))
    except OSError as exc:
        print(f"xirang: run cost not recorded in the cost store: {exc}", file=sys.stderr)


def _energy(
    config: dict[str, Any], summary: dict[str, Any], sampler: PowerSampler | None
) -> tuple[float, float | None]:
    """Watts per device (measured, else configured) and, for an energy-aware policy with a
    measurement, the amount re-quoted with the measured watts (else None: the summary's)."""
    cost = dict(config.get("cost") or {})
    device_type = str((config.get("runtime") or {}).get("device_type") or "")
    watts, source = run_watts(
        device_type, sampler.mean_w if sampler else None, cost.get("watts") or {}
    )
    if source != MEASURED or not device_type:
        return watts, None
    from xirang import get_registry

    registry = get_registry()
    # only a policy that prices energy takes ``watts`` (the default flat price has none: a
    # GPU run with a power reading once ended in a TypeError here)
    if not getattr(registry.create("cost", cost), "energy", False):
        return watts, None
    cost["watts"] = {**(cost.get("watts") or {}), device_type: watts}
    policy = registry.create("cost", cost)
    runtime = config.get("runtime") or {}
    devices = int(runtime.get("devices") or summary.get("world_size") or 1)
    return watts, policy.quote(device_type, devices, float(summary.get("wall_time_s") or 0)).amount
