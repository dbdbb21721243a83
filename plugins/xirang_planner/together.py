"""Timing a piece of work on every worker at once: the calibration's probes and the wrapper
measurements both ask how long all workers take when they start together (a barrier before and
after), which is what a step of a parallel run pays."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def time_together(fn: Callable[[], Any], repeats: int = 3) -> float:
    """Best seconds for every worker to finish ``fn`` when all start it at once."""
    import torch.distributed as dist

    best = float("inf")
    for _ in range(repeats):
        dist.barrier()
        started = time.perf_counter()
        fn()
        dist.barrier()
        best = min(best, time.perf_counter() - started)
    return best
