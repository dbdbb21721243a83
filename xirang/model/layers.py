"""How a stack of transformer layers splits, the parts every model family's split plan shares.

A family's ``parallelize`` object (see ``plugins/xirang_gpt`` and ``plugins/xirang_llama``)
names its own modules; the mechanics are here: which layers a pipeline stage keeps, and the
Megatron tensor/sequence-parallel layout of a block stack with the sequence split at its ends.
torch is imported inside the functions. Where a stage's layers start and end is the plan's
(:func:`xirang_core.parallel.plan.stage_bounds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xirang_core.parallel.plan import stage_bounds

if TYPE_CHECKING:
    from torch import nn


def keep_stage_layers(layers: nn.ModuleDict, stage: int, stages: int) -> tuple[int, int]:
    """Delete the layers ``stage`` does not run; the kept ones keep their whole-model names
    (the dict is keyed by layer index), so checkpoints line up across strategies."""
    names = list(layers.keys())
    lo, hi = stage_bounds(len(names), stage, stages)
    for name in names[:lo] + names[hi:]:
        del layers[name]
    return lo, hi


def parallelize_blocks(
    layers: nn.ModuleDict,
    final_norm: nn.Module | None,
    mesh: Any,
    sequence_parallel: bool,
    *,
    colwise: Sequence[str],
    rowwise: Sequence[str],
    norms: Sequence[str] = (),
    gathered: Sequence[str] = (),
) -> None:
    """Megatron's layout on every block: the ``colwise`` projections split by output columns
    (heads, MLP hidden units), the ``rowwise`` ones by input rows, so each attention and MLP
    needs one reduction. With ``sequence_parallel`` the residual stream between them and the
    ``norms`` are split along the sequence, and the ``gathered`` submodules (the ones a norm
    feeds) take the whole sequence back. Names are relative to a block."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    between = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, Any] = {name: ColwiseParallel() for name in colwise}
    plan.update({name: RowwiseParallel(output_layouts=between) for name in rowwise})
    if sequence_parallel:
        gather = PrepareModuleInput(
            input_layouts=(between,), desired_input_layouts=(Replicate(),), use_local_output=True
        )
        plan.update({name: SequenceParallel() for name in norms})
        plan.update({name: gather for name in gathered})
    for block in layers.values():
        parallelize_module(block, mesh, plan)
    if sequence_parallel:
        split_sequence_at_ends(layers, final_norm, mesh)


def split_sequence_at_ends(layers: nn.ModuleDict, final_norm: nn.Module | None, mesh: Any) -> None:
    """The first block takes its sequence share of the (replicated) embeddings; the final
    norm gathers the whole sequence back before the replicated head. A stage without the
    final norm (the middle of a pipeline) hands the whole sequence to the next stage."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    if not len(layers):
        return
    blocks = list(layers.values())
    split = PrepareModuleInput(
        input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True
    )
    parallelize_module(blocks[0], mesh, split)
    if final_norm is not None:
        join = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        )
        parallelize_module(final_norm, mesh, join)
    else:
        blocks[-1].register_forward_hook(gather_sequence_hook(mesh))


def gather_sequence_hook(mesh: Any) -> Any:
    """A forward hook that turns a block's sequence shard into the whole sequence."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        full = DTensor.from_local(output, mesh, (Shard(1),), run_check=False)
        return full.redistribute(mesh, (Replicate(),)).to_local()

    return hook
