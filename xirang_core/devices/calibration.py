"""Measure a device's matmul throughput and memory bandwidth once, and cache the result.

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
from typing import TYPE_CHECKING, Any, Union

from xirang_core.paths import xirang_home
from xirang_core.specs import Calibration

if TYPE_CHECKING:
    import torch

#: a torch device, or its name ("cuda:0")
DeviceLike = Union["torch.device", str]

#: measurement windows per figure (the best counts) and untimed calls before them
WINDOWS = 3
WARMUP_CALLS = 3


def cache_path(key: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("_")
    return xirang_home() / "calibration" / f"{slug}.json"


def cached_calibration(key: str, measure: Callable[[], Calibration], refresh: bool) -> Calibration:
    """The calibration stored under ``key``, measuring (and storing) it when absent or asked."""
    path = cache_path(key)
    if path.exists() and not refresh:
        try:
            return Calibration(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # an unreadable cache entry is measured again, not trusted
    result = measure()
    result = Calibration(**{**asdict(result), "key": key, "measured_at": _now()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result), indent=2))
    tmp.replace(path)
    return result


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


def synchronizer(*devices: DeviceLike) -> Callable[[], None]:
    """Waits for the queued work of every one of ``devices`` (a no-op for the CPU)."""
    import torch

    waits = []
    for device in map(torch.device, devices):
        module = getattr(torch, device.type, None)
        sync = getattr(module, "synchronize", None) if device.type != "cpu" else None
        if callable(sync):
            waits.append(lambda sync=sync, device=device: sync(device))

    def wait_all() -> None:
        for wait in waits:
            wait()

    return wait_all


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
