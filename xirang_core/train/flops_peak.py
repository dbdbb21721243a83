"""The peak a run's MFU is measured against: a worker's peak (an accelerator's datasheet, else
the best measurement) times the workers that can compute at once.

A device that several workers share (the CPU) is calibrated with the threads each worker gets.
Once there are more workers than the host has room for at that thread count, the extra
workers wait for cores rather than add compute, so they add nothing to the peak: four
one-thread workers on two cores can reach two threads' worth, not four.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from xirang_core.devices.datasheet import datasheet_tflops
from xirang_core.specs import Calibration

log = logging.getLogger("xirang.devices")


class Peak(NamedTuple):
    """One worker's peak FLOP/s and where it comes from ("bfloat16 datasheet", "float32
    measured at load 0.31")."""

    flops: float
    source: str


class MfuFigure(NamedTuple):
    """The MFU a summary reports, the per-worker peak it is a share of, that peak's source
    and, when it is above 100% all the same, why it cannot be trusted."""

    mfu: float
    peak_flops_per_worker: float
    source: str
    note: str


def concurrent_workers(nproc: int, threads: int, cores: int, shareable: bool) -> int:
    """How many of ``nproc`` workers of ``threads`` threads each compute at the same time."""
    if not shareable:
        return nproc  # one device per worker
    return max(1, min(nproc, cores // max(1, threads)))


def run_peak_flops(runtime: dict, world_size: int) -> float:
    """The whole run's peak FLOP/s for ``world_size`` workers (fewer after an eviction)."""
    workers = min(world_size, runtime.get("concurrent_workers", world_size))
    return runtime["peak_flops_per_worker"] * workers


def device_peak(calibration: Calibration, dtype: str, model: str, accelerator: bool) -> Peak:
    """One worker's peak in ``dtype``: an accelerator's datasheet where the table names
    ``model`` (MFU as PaLM and torchtitan report it), else the best measured figure, saying
    at what load and whether that was on a busy host (the figure is then too low)."""
    sheet = datasheet_tflops(model, dtype) if accelerator else None
    if sheet:
        return Peak(sheet * 1e12, f"{dtype} datasheet")
    load = calibration.measured_load.get(dtype)
    where = f" at load {load:.2f}" if load is not None else ""
    if dtype in calibration.measured_busy:
        where += " on a busy host (no quiet measurement yet)"
    return Peak(calibration.peak_flops(dtype), f"{dtype} measured{where}")


def trusted_mfu(mfu: float, runtime: dict[str, Any], remeasure: Callable[[], Peak]) -> MfuFigure:
    """``mfu`` (a share of the runtime's per-worker peak) as the summary reports it. A run
    cannot compute faster than its device, so one above its peak shows a peak measured too
    low (under load): it says so, measures again (``remeasure``: the device's best figure
    after a new measurement) and reports against that; still above, it says the figure cannot
    be trusted rather than print it silently."""
    old = runtime["peak_flops_per_worker"]
    source = runtime.get("peak_source", "calibrated")
    if mfu <= 1.0:
        return MfuFigure(mfu, old, source, "")
    log.warning(
        "this run computed %.0f%% of its peak (%s): measuring the peak again", mfu * 100, source
    )
    peak = remeasure()
    mfu *= old / max(peak.flops, old)
    if mfu <= 1.0:
        return MfuFigure(mfu, max(peak.flops, old), peak.source, "")
    note = (
        f"above the device's peak ({peak.source}) even after measuring it again: "
        f"the peak or the model's FLOP count is off, so this MFU cannot be trusted"
    )
    log.warning("MFU %.0f%%: %s", mfu * 100, note)
    return MfuFigure(mfu, max(peak.flops, old), peak.source, note)
