"""Measure a device's matmul throughput and memory bandwidth, and keep the best figures.

The numbers are the device's performance baseline: model FLOPs utilisation is reported against
them, the pool converts logical cards with them, and the planner predicts step time from them.
Vendor datasheet peaks overstate what a framework reaches, so xirang measures.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xirang.devices.synchronize import DeviceLike, synchronizer
from xirang_core.devices.cores import busy_warning, host_load
from xirang_core.paths import replace_text, xirang_home
from xirang_core.specs import Calibration

#: measurements a store lists beside its best figures, newest last, each with its load
HISTORY = 10
#: measurements after which a store's best figures are used even if none was taken quiet
BUSY_TRIES = 5
#: measurement windows per figure (the best counts) and untimed calls before them
WINDOWS = 3
WARMUP_CALLS = 3


def cache_path(key: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("_")
    return xirang_home() / "calibration" / f"{slug}.json"


def cached_calibration(
    key: str,
    measure: Callable[[], Calibration],
    refresh: bool,
    cores: int = 1,
    load_now: Callable[[], float] = host_load,
) -> Calibration:
    """The best figures measured under ``key``. A peak measured once under whatever load there
    was read anywhere from 0.035 to 0.349 TFLOP/s on one host within two hours, and MFU against
    the low one printed 210%. So every measurement records the host's load average, the best
    figure of each kind is kept, and a store whose best figures were not all measured on a
    quiet host (other work left the ``cores`` measuring free) is measured again when asked,
    until they were or :data:`BUSY_TRIES` measurements were taken (a host that is never quiet
    then stops paying for one at every run: a run that beats the peak still measures again);
    ``refresh`` measures again in any case. ``load_now`` reads the load."""
    path = cache_path(key)
    stored = _read(path)
    best = stored.get("best") if stored else None
    tries = len(stored.get("measurements", [])) if stored else 0
    if best is not None and not refresh and (quiet(best, cores) or tries >= BUSY_TRIES):
        return best
    load = load_now()
    new = measure()
    best = keep_best(best, new, load, key, cores)
    history = [*(stored or {}).get("measurements", []), _measurement(new, load)][-HISTORY:]
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, json.dumps({"best": asdict(best), "measurements": history}, indent=2))
    return best


def quiet(calibration: Calibration, cores: int) -> bool:
    """Whether every matmul figure of ``calibration`` was measured while other work left the
    ``cores`` measuring free (figures of unknown load, from older stores, are not)."""
    loads = calibration.measured_load
    return all(_quiet_at(loads.get(d), cores) for d in calibration.matmul_tflops)


#: how many times a kept figure a busy measurement must read to replace it: a burst between
#: load readings lifts a busy figure by a little (0.4 against a quiet 0.363 TFLOP/s); several
#: times the kept one shows that one was measured under load the load average missed (a peak
#: stored at 1e-5 TFLOP/s that a run then beat, issue 38)
DISPROVES = 2.0


def keep_best(
    old: Calibration | None, new: Calibration, load: float, key: str, cores: int = 1
) -> Calibration:
    """Each figure's best of ``old`` and ``new`` (measured at ``load``), a quiet measurement
    (other work left the ``cores`` measuring free) before any busy one: a busy host read
    0.070 TFLOP/s where the quiet one reads 0.363, and MFU against that read 46% where it was
    12%. Among measurements of one kind the fastest counts (other work only ever makes one
    slower), and a busy one over :data:`DISPROVES` times the kept figure replaces it. Figures
    with no quiet measurement yet are listed in ``measured_busy``."""
    tflops = dict(old.matmul_tflops) if old else {}
    loads = dict(old.measured_load) if old else {}
    for dtype, value in new.matmul_tflops.items():
        mine = (_quiet_at(load, cores), value)
        kept = (_quiet_at(loads.get(dtype), cores), tflops.get(dtype, 0.0))
        if mine > kept or value > DISPROVES * kept[1]:
            tflops[dtype], loads[dtype] = value, load
    links = [c.link_bandwidth_gbps for c in (old, new) if c and c.link_bandwidth_gbps]
    return Calibration(
        device_model=new.device_model,
        matmul_tflops=tflops,
        memory_bandwidth_gbps=max(
            new.memory_bandwidth_gbps, old.memory_bandwidth_gbps if old else 0.0
        ),
        link_bandwidth_gbps=max(links) if links else None,
        measured_at=_now(),
        key=key,
        measured_load=loads,
        measured_busy=tuple(d for d in tflops if not _quiet_at(loads.get(d), cores)),
    )


def _quiet_at(load: float | None, cores: int) -> bool:
    """Whether a figure measured at ``load`` (None: unknown, an older store's) had its
    ``cores`` free of other work."""
    return load is not None and busy_warning(load, cores) is None


def _measurement(calibration: Calibration, load: float) -> dict[str, Any]:
    """One measurement as the store lists it, with the load it was taken at."""
    return {
        "measured_at": _now(),
        "load": load,
        "matmul_tflops": dict(calibration.matmul_tflops),
        "memory_bandwidth_gbps": calibration.memory_bandwidth_gbps,
    }


def _read(path: Path) -> dict[str, Any] | None:
    """The store at ``path``: ``{"best": Calibration, "measurements": [...]}``; a store of
    the older form (one Calibration) becomes its best, of unknown load; an unreadable one is
    measured again, not trusted."""
    try:
        found = json.loads(path.read_text())
        if "best" not in found:
            return {"best": Calibration(**found), "measurements": []}
        return {**found, "best": Calibration(**found["best"])}
    except (OSError, ValueError, TypeError):
        return None


def measure_matmul_tflops(
    device: DeviceLike, dtypes: Iterable[str], size: int = 1024, seconds: float = 0.3
) -> dict[str, float]:
    """Sustained FLOP/s of square matmuls per dtype (2·n³ FLOPs each), in TFLOP/s.

    The dtypes take turns window by window and each keeps its best window. Measured one after
    the other, a burst of other work on a shared host could cover one dtype's whole turn: bf16,
    measured last, read 0.001 TFLOP/s on two busy cores (and the cache kept it). ``tfloat32`` is
    float32 with TF32 matmuls allowed, what an fp32 run computes in on CUDA."""
    import torch

    names = list(dtypes)
    calls = {name: _matmul(name, size, device) for name in names}
    sync = synchronizer(device)
    best = dict.fromkeys(names, 0.0)
    for _ in range(WARMUP_CALLS):  # first calls pack weights and pick kernels (oneDNN bf16)
        for name, call in calls.items():
            with _tf32(torch, name == "tfloat32"):
                call()
    sync()
    for _ in range(WINDOWS):
        for name, call in calls.items():
            with _tf32(torch, name == "tfloat32"):
                best[name] = max(best[name], _window_rate(call, sync, seconds / WINDOWS))
    # four significant digits: a slow dtype (fp16 on a CPU) must not round to zero
    return {name: float(f"{2 * size**3 * rate / 1e12:.4g}") for name, rate in best.items()}


def _matmul(name: str, size: int, device: DeviceLike) -> Callable[[], object]:
    import torch

    dtype = torch.float32 if name == "tfloat32" else getattr(torch, name)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return lambda: torch.mm(a, b)


@contextlib.contextmanager
def _tf32(torch: Any, allowed: bool) -> Iterator[None]:
    """TF32 matmuls allowed inside (only while measuring ``tfloat32``)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed or before
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def measure_memory_bandwidth_gbps(
    device: DeviceLike, mbytes: int = 128, seconds: float = 0.3
) -> float:
    """Copy bandwidth (read + write) of a large buffer, in GB/s."""
    import torch

    n = mbytes * 2**20 // 4
    src = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    rate = _best_rate(lambda: dst.copy_(src), synchronizer(device), seconds)
    return round(2 * src.numel() * 4 * rate / 1e9, 2)


def measure_device_to_device_gbps(
    src: DeviceLike, dst: DeviceLike, mbytes: int = 256, seconds: float = 0.3
) -> float:
    """One-way copy bandwidth from device ``src`` to device ``dst``, in GB/s.

    Run between two devices of one node this measures their link (NVLink, xGMI, HCCS or PCIe
    through the host), the figure the planner weighs tensor- and pipeline-parallel traffic by.
    """
    import torch

    n = mbytes * 2**20 // 4
    source = torch.empty(n, dtype=torch.float32, device=src).fill_(1.0)
    target = torch.empty(n, dtype=torch.float32, device=dst)
    sync = synchronizer(src, dst)
    rate = _best_rate(lambda: target.copy_(source, non_blocking=True), sync, seconds)
    return round(source.numel() * 4 * rate / 1e9, 2)


def _best_rate(
    fn: Callable[[], object], sync: Callable[[], None], seconds: float, windows: int = WINDOWS
) -> float:
    """Calls of ``fn`` per second in the best of ``windows`` windows sharing ``seconds``.

    A peak is what the device can do, so the fastest window counts: a burst of other work on
    the machine during one window must not lower the baseline that MFU is reported against."""
    fn()
    sync()
    return max(_window_rate(fn, sync, seconds / windows) for _ in range(windows))


def _window_rate(fn: Callable[[], object], sync: Callable[[], None], seconds: float) -> float:
    """Calls of ``fn`` per second over one window of at least ``seconds`` (4 calls at least)."""
    count, start = 0, time.perf_counter()
    while True:
        fn()
        count += 1
        if count % 4 == 0:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return count / elapsed


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
