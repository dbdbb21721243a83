"""``parallel.stage_layers=auto``: each pipeline stage's layers from its devices' measured
speed and memory, settled by every rank together before the model is cut.

Each rank times forwards of one micro-batch through the whole model (the same measurement that
gives ``parallel.balance``'s first shares), and reads its device's memory; a stage runs at its
slowest rank's speed and holds what its smallest memory holds by the memory model (the
``xirang_stage_capacity`` hook, which the built-in planner plugin answers). The split that
makes the slowest stage fastest (:func:`xirang.parallel.speed_split`) is logged, written to
the run's events and kept in the metrics and the summary (``pipeline_stage_layers``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch import nn

from xirang.launch import record_event
from xirang.parallel import ParallelPlan, forward_seconds, gather, speed_split

log = logging.getLogger("xirang.pipeline")


def auto_split(model: nn.Module, ctx: Any, plan: ParallelPlan, shape: Any) -> tuple[int, ...]:
    """Layers per stage for this run's devices; every rank gets the same answer (a
    collective). Raises :class:`~xirang.planning.PlanError` when no split fits."""
    from xirang import get_registry

    tokens = torch.zeros(plan.micro_batch, shape.seq_len, dtype=torch.long)
    seconds = forward_seconds(model, (tokens,), ctx.device)
    grid = ctx.mesh.mesh  # (pp, dp, tp) ranks
    stage = next(s for s in range(plan.pp) if ctx.rank in grid[s].flatten().tolist())
    measured = gather([float(stage), seconds, float(device_memory(ctx.device))], ctx.device)
    slowest = [max(t for s, t, _ in measured if s == i) for i in range(plan.pp)]
    memory = [int(min(m for s, _, m in measured if s == i)) for i in range(plan.pp)]
    hook = get_registry().hook.xirang_stage_capacity
    capacities = [
        _capacity(hook(shape=shape, plan=plan, stage=i, memory_bytes=m), shape.layers)
        for i, m in enumerate(memory)
    ]
    counts = speed_split([1 / t for t in slowest], shape.layers, capacities)
    if ctx.is_main:
        speeds = [round(slowest[0] / t, 3) for t in slowest]
        log.warning(
            "parallel.stage_layers=auto chose %s: stage speeds %s (relative to stage 0), "
            "at most %s layers by memory",
            list(counts),
            speeds,
            capacities,
        )
        record_event(ctx.run_dir, "stage_layers", layers=list(counts), speeds=speeds)
    return counts


def _capacity(answer: int | None, layers: int) -> int:
    """A stage's most layers: the memory model's answer, or all of them without one."""
    return layers if answer is None else answer


def device_memory(device: torch.device) -> int:
    """Bytes of memory this rank's device has: an accelerator's own, or this host's memory
    shared by its workers (CPU workers)."""
    if device.type != "cpu":
        return int(getattr(torch, device.type).mem_get_info(device)[1])
    host = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return host // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
