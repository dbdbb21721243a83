"""Meter every finished training run into the cost store (``xirang cost report`` shows it).

The run is charged what its own cost policy quoted in the summary, to its project (and the team
``team=`` names, ``default`` otherwise). A run submitted to the pool (``scheduler=pool``) is not
charged here: the pool's metering charges the allocation it ran in, and charging both would bill
the same device time twice. A failure to record is reported on stderr but does not fail a run
that already trained and saved its results.

While the run trains, its device's power is sampled (:class:`~xirang_service.cost.energy.
PowerSampler`, at the loop's log steps, at most every 30 s) where the device plugin reads it
(NVML on NVIDIA GPUs); the charge's energy then uses the measured mean instead of the configured
``cost.watts``, and an energy-aware policy's amount is re-quoted with it. On the CPU, and on
devices without a reading, the configured watts stay.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from typing import Any

from xirang.cost import MEASURED, CostStore, PowerSampler, run_charge, run_watts

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
    charge = run_charge(summary, config, time.time(), *_energy(config, summary, sampler))
    try:
        store = CostStore()
    except (OSError, sqlite3.Error) as exc:
        print(f"xirang: run cost not recorded in the cost store: {exc}", file=sys.stderr)
        return
    try:
        store.record([charge])
    except sqlite3.Error as exc:
        print(f"xirang: run cost not recorded in the cost store: {exc}", file=sys.stderr)
    finally:
        store.close()


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
