"""The peak a run's MFU is measured against: the calibrated per-worker peak times the workers
that can compute at once.

A device that several workers share (the CPU) is calibrated with the threads each worker gets.
Once there are more workers than the host has room for at that thread count, the extra
workers wait for cores rather than add compute, so they add nothing to the peak: four
one-thread workers on two cores can reach two threads' worth, not four.
"""

from __future__ import annotations


def concurrent_workers(nproc: int, threads: int, cores: int, shareable: bool) -> int:
    """How many of ``nproc`` workers of ``threads`` threads each compute at the same time."""
    if not shareable:
        return nproc  # one device per worker
    return max(1, min(nproc, cores // max(1, threads)))


def run_peak_flops(runtime: dict, world_size: int) -> float:
    """The whole run's peak FLOP/s for ``world_size`` workers (fewer after an eviction)."""
    workers = min(world_size, runtime.get("concurrent_workers", world_size))
    return runtime["peak_flops_per_worker"] * workers
