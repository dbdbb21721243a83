"""What the data-parallel wrappers cost on this host, beyond their collectives' bytes.

FSDP2 (``fully_shard``) and DDP run Python hooks on every forward and backward, copy
parameters and gradients in and out of their flat buffers, and drive their collectives from
Python; on a CPU host with a small model those costs rival the arithmetic, and a ring model of
the bytes alone misses them. Measured here, every worker at once in data-parallel groups of
each size (as a plan's groups run), with the model's own layer as the one wrapped unit, driven
the way ``torch.distributed.pipelining``'s stage drives it (gradient sync and resharding only
on the step's last backward):

- FSDP, ``reshard_after_forward=False`` (zero 1/2), one and several micro-batches: the slope is
  the per-unit hook cost of one micro-batch; the intercept, less the plain optimizer step and
  less the ring time of the unit's all-gather and reduce-scatter, is the per-unit cost of each
  collective call (copy-in/out, stream bookkeeping) plus the sharded optimizer's DTensor
  overhead.
- FSDP, ``reshard_after_forward=True`` (zero 3): the extra slope is the re-gather each
  micro-batch's backward then pays (the next forward finds the parameters still gathered,
  as resharding after backward waits for the last).
- DDP under a pipeline (``no_sync`` until the last backward): per micro-batch and per step,
  beyond the all-reduce's ring time.

The variants are timed in alternating rounds (best of each), so a spell of load from other work
hits them alike and mostly cancels in the differences; each figure is floored at zero.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xirang.planning import Link, ring_time
from xirang_planner.together import time_together

#: micro-batch counts the wrappers are timed at (a line through them: slope and intercept)
MICRO_COUNTS = (1, 2, 4)
#: the data-parallel group the wrappers are timed on: their overheads are per call, and the
#: bytes' share that grows with the group is the measured link's ring time
GROUP = 2
#: alternating timing rounds; each figure is the best of its rounds
ROUNDS = 4


@dataclass(frozen=True)
class WrapperCosts:
    """Seconds per worker with every worker busy (shared-core wall time), beyond ring time."""

    #: FSDP hooks per unit and micro-batch (forward and backward together)
    fsdp_hook_s: float = 0.0
    #: FSDP per unit and step-time collective call (copy-in/out, the sharded optimizer's
    #: DTensor dispatch, bookkeeping)
    fsdp_call_s: float = 0.0
    #: FSDP per unit and re-gather in a micro-batch under ``reshard_after_forward``, beyond
    #: its ring time
    fsdp_regather_s: float = 0.0
    #: the root unit's (embeddings, final norm, head: fewer, larger tensors) hooks per
    #: micro-batch and cost per step-time collective call
    fsdp_root_hook_s: float = 0.0
    fsdp_root_call_s: float = 0.0
    #: DDP per micro-batch under ``no_sync`` (its forward's and the context's bookkeeping)
    ddp_micro_s: float = 0.0
    #: DDP per step (reducer preparation, bucket copies)
    ddp_step_s: float = 0.0


def measure_wrappers(world: int, parts: Any, micro_batch: int) -> dict[str, Any]:
    """This worker's timings of the layer plain, under FSDP (both reshard choices) and under
    DDP, data-parallel groups of :data:`GROUP` consecutive ranks all running at once."""
    import copy

    import torch
    from torch.distributed.device_mesh import init_device_mesh

    shape = (world // GROUP, GROUP)
    mesh = init_device_mesh(parts.device.type, shape, mesh_dim_names=("rest", "dp"))["dp"]
    x = torch.randn(micro_batch, parts.shape.seq_len, parts.shape.hidden, device=parts.device)
    tokens = parts.tokens(micro_batch)

    def layer(module: Any) -> Callable[[int], None]:
        return _stepper(parts, module, lambda: module(x).sum())

    def root(module: Any) -> Callable[[int], None]:
        return _stepper(parts, module, lambda: module(tokens, tokens))

    steps = {
        "plain": layer(parts.layer_copy()),
        "fsdp": layer(_sharded(parts.layer_copy(), mesh, reshard=False)),
        "regather": layer(_sharded(parts.layer_copy(), mesh, reshard=True)),
        "ddp": layer(_replicated(parts.layer_copy(), mesh)),
        "root_plain": root(copy.deepcopy(parts.rest)),
        "root_fsdp": root(_sharded(copy.deepcopy(parts.rest), mesh, reshard=False)),
    }
    found: dict[str, Any] = {name: dict.fromkeys(MICRO_COUNTS, float("inf")) for name in steps}
    for _ in range(ROUNDS):  # alternating: a spell of outside load hits every variant alike
        for name, step in steps.items():
            for m in MICRO_COUNTS:
                seconds = time_together(functools.partial(step, m), repeats=1)
                found[name][m] = min(found[name][m], seconds)
    for prefix, module in (("", parts.block), ("root_", parts.rest)):
        params = list(module.parameters())
        found[prefix + "bytes"] = sum(p.numel() * p.element_size() for p in params)
        found[prefix + "params"] = sum(p.numel() for p in params)
    return found


def derive(found: dict[str, Any], link: Link, optimizer_s_per_param: float) -> WrapperCosts:
    """The per-unit primitives from the timings (see the module docstring). ``link`` is the
    measured link of the group; ``optimizer_s_per_param`` the plain optimizer's cost with
    every worker busy (the sharded step's arithmetic is the planner's own term)."""
    nbytes = found["bytes"]
    plain, fsdp, regather, ddp = (_line(found[k]) for k in ("plain", "fsdp", "regather", "ddp"))
    gather = ring_time("all_gather", nbytes, GROUP, link)
    hook, call = _fsdp_unit(found, "", link, optimizer_s_per_param)
    root_hook, root_call = _fsdp_unit(found, "root_", link, optimizer_s_per_param)
    ddp_step = ddp[1] - plain[1] - ring_time("all_reduce", nbytes, GROUP, link)
    return WrapperCosts(
        fsdp_hook_s=hook,
        fsdp_call_s=call,
        fsdp_regather_s=max(0.0, regather[0] - fsdp[0] - gather),
        fsdp_root_hook_s=root_hook,
        fsdp_root_call_s=root_call,
        ddp_micro_s=max(0.0, ddp[0] - plain[0]),
        ddp_step_s=max(0.0, ddp_step),
    )


def _fsdp_unit(
    found: dict[str, Any], prefix: str, link: Link, optimizer_s_per_param: float
) -> tuple[float, float]:
    """Hooks per micro-batch and cost per step-time collective call of one FSDP unit (the
    layer, or with ``prefix`` "root_" the model's remainder)."""
    nbytes = found[prefix + "bytes"]
    plain, fsdp = _line(found[prefix + "plain"]), _line(found[prefix + "fsdp"])
    gather = ring_time("all_gather", nbytes, GROUP, link)
    scatter = ring_time("reduce_scatter", nbytes, GROUP, link)
    # the sharded run's optimizer works on 1/GROUP of the parameters: add back the rest
    optimizer_s = optimizer_s_per_param * found[prefix + "params"] * (1 - 1 / GROUP)
    step = fsdp[1] - plain[1] + optimizer_s
    return max(0.0, fsdp[0] - plain[0]), max(0.0, (step - gather - scatter) / 2)


def _line(seconds: dict[int, float]) -> tuple[float, float]:
    """Slope (per micro-batch) and intercept (per step) of the least-squares line."""
    import numpy as np

    counts = sorted(seconds)
    slope, intercept = np.polyfit(counts, [seconds[m] for m in counts], 1)
    return float(slope), float(intercept)


def _sharded(module: Any, mesh: Any, reshard: bool) -> Any:
    from torch.distributed.fsdp import fully_shard

    return fully_shard(module, mesh=mesh, reshard_after_forward=reshard)


def _replicated(module: Any, mesh: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(module, process_group=mesh.get_group())


def _stepper(parts: Any, module: Any, loss_of: Callable[[], Any]) -> Callable[[int], None]:
    """One step of ``module`` as a function of its micro-batch count: that many
    forward-backward passes (gradients synchronised on the last only, as the pipeline stage
    and gradient accumulation do), then the optimizer step. Warmed up once."""
    from xirang.parallel import build_optimizer

    optimizer = build_optimizer(module, parts.config["optim"])

    def step(micro: int) -> None:
        for i in range(micro):
            _pass(module, i == micro - 1, loss_of)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        parts.wait()  # the device's queued work is part of the step

    step(1)  # buffers, optimizer state
    return step


def _pass(module: Any, last: bool, loss_of: Callable[[], Any]) -> None:
    """One forward-backward as ``PipelineStage`` drives the wrapper: FSDP syncs and reshards on
    the last backward only; DDP runs every forward under ``no_sync`` and its reducer is armed
    by hand for the last backward."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(module, FSDPModule):
        module.set_is_last_backward(last)
        module.set_reshard_after_backward(last)
        module.set_requires_gradient_sync(last)
    if not isinstance(module, DistributedDataParallel):
        loss_of().backward()
        return
    with module.no_sync():
        loss = loss_of()
    if last:
        module.reducer.prepare_for_backward([loss])
        loss.backward()
    else:
        with module.no_sync():
            loss.backward()
