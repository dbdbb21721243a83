"""Sharded data parallel with FSDP2 ``fully_shard``, and ZeRO-like stages over it.

- zero=3: parameters, gradients and optimizer state sharded; parameters gathered per layer in
  forward and again in backward (``reshard_after_forward=True``).
- zero=2: as 3, but gathered parameters stay until backward is done: one gather per step.
- zero=1: as 2, and gradients stay whole across the micro-batches of a step and are reduced
  (reduce-scatter) once, after the last one: ZeRO-1's traffic and its full-size gradients,
  with the optimizer state still sharded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, cast

from torch import nn


def shard_model(
    model: nn.Module,
    layers: nn.ModuleDict,
    mesh: Any,
    zero: int,
    mp_policy: Any = None,
    balanced: bool = False,
    ends: Sequence[Sequence[nn.Module]] = (),
) -> nn.Module:
    """Shard each layer, then each of ``ends`` (the family's units beside the layers, in
    forward order: embeddings, then final norm and head), then the root (what is left).
    torchtitan's layout: the ends are units of their own, gathered only around their own
    forward and backward rather than all step in the root; the last one (the head) is not
    resharded after forward, as backward starts with it at once. ``mp_policy`` (a
    ``MixedPrecisionPolicy``, from ``trainer.precision``) gathers 16-bit parameters and reduces
    gradients in fp32; the sharded parameters, the optimizer's, stay fp32.

    ``balanced`` (``parallel.balance``: ranks run unequal numbers of micro-batches): every
    collective of a step must still pair up across ranks, so parameters are gathered once,
    at a step's first forward, and stay until the reduce-scatter after its last backward
    (ZeRO-1's deferred reduction, with ZeRO-2's gathered parameters)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reshard = zero >= 3
    policy = mp_policy or MixedPrecisionPolicy()
    for layer in layers.values():
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    for position, unit in enumerate(ends, start=1):
        last = position == len(ends)
        unit_reshard = reshard and not last
        fully_shard(list(unit), mesh=mesh, reshard_after_forward=unit_reshard, mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    if balanced:
        cast(Any, model).set_reshard_after_forward(False)  # fully_shard made it an FSDPModule
    if zero == 1 or balanced:
        # an instance attribute the trainer looks for, as it does DDP's method (set past
        # Module.__setattr__, which files tensors and modules, not a method)
        object.__setattr__(model, "no_sync", lambda: _defer_reduction(model))
    return model


@contextlib.contextmanager
def _defer_reduction(model: Any) -> Iterator[None]:
    """Keep whole gradients and skip the reduce-scatter for the micro-batches inside."""
    model.set_requires_gradient_sync(False)
    model.set_reshard_after_backward(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
        model.set_reshard_after_backward(True)


def replicate_model(
    model: nn.Module, mesh: Any, pipeline: bool = False, balanced: bool = False
) -> nn.Module:
    """Plain data parallel (zero=0) over the ``dp`` group: DDP's bucketed all-reduce.

    Under a pipeline, torch's stage runs every forward under ``no_sync`` and arms DDP's reducer
    by hand (``prepare_for_backward``) for the step's last backward only. Its first step's
    shape inference, though, calls the module directly, which would arm the reducer too: the
    first real backward then reduces early and records the parameters for the one-time bucket
    rebuild, the last backward records them again, and the second step fails ("rebuilt
    parameter indices size is not same"). So the replica never arms itself in forward; the
    stage's last backward alone does, and the rebuild sees each parameter once.
    """
    from torch.nn.parallel import DistributedDataParallel

    # balanced ranks run unequal forwards: a buffer broadcast in each would not pair up
    replica = DistributedDataParallel(
        model, process_group=mesh.get_group(), broadcast_buffers=not balanced
    )
    if pipeline:
        replica.require_backward_grad_sync = False  # as no_sync sets it, for good
    return replica
