"""Activation checkpointing: full (keep only each layer's input), or selective as torchtitan's
``activation_checkpoint.mode=selective`` does it, per op or every Nth layer.

- ``full``: every layer keeps its input and re-runs its forward in backward.
- ``selective``, ``every=0`` (op-level): every layer keeps the outputs of the ops costly to
  redo (attention, and every other matmul) and recomputes the cheap elementwise ones (norms,
  SwiGLU's activation, RoPE, residual adds), torch.utils.checkpoint's
  ``create_selective_checkpoint_contexts``.
- ``selective``, ``every=N``: every Nth layer fully checkpointed, the others keep everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: what ``parallel.recompute`` may be
MODES = ("none", "full", "selective")

#: ops whose outputs op-level selective recompute keeps (torchtitan's ``_save_list``): the
#: attention kernels of every device, and the matmuls (every other one, see
#: :func:`_policy`); reduce-scatter under sequence parallel, so backward never re-communicates
_SAVED_OPS = {
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
}
_MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def check_settings(mode: str, every: int) -> str | None:
    """Why ``parallel.recompute`` / ``parallel.recompute_every`` cannot run, or None."""
    if mode not in MODES:
        return f"parallel.recompute={mode!r}: valid values are {', '.join(MODES)}"
    if every < 0:
        return f"parallel.recompute_every={every}: must be 0 (op-level) or a layer count >= 1"
    if every and mode != "selective":
        return (
            f"parallel.recompute_every={every} applies to parallel.recompute=selective only "
            f"(got recompute={mode})"
        )
    return None


def checkpoint_layers(layers: nn.ModuleDict, mode: str = "full", every: int = 0) -> None:
    """Wrap the layers ``mode`` and ``every`` name in place (see the module docstring). The
    wrapper's state-dict hooks strip its own name, so checkpoints of a recomputing run load
    into one that does not, and back."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "none":
        return
    extra: dict[str, Any] = {}
    if mode == "selective" and every == 0:
        extra["context_fn"] = _selective_contexts
    for position, (name, layer) in enumerate(list(layers.items()), start=1):
        if mode == "selective" and every and position % every:
            continue  # torchtitan's layer policy: the Nth, 2Nth, ... layer recomputes
        layers[name] = checkpoint_wrapper(layer, preserve_rng_state=False, **extra)


def _selective_contexts() -> Any:
    """A fresh pair of forward/recompute contexts for one layer call: the matmul counts start
    over, so the forward and its recompute choose the same matmuls to keep."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_policy({"forward": 0, "recompute": 0}))


def _policy(counts: dict[str, int]) -> Callable[..., Any]:
    """Keep the :data:`_SAVED_OPS` outputs and every other matmul's (the second, fourth, ...
    are recomputed: half the matmul memory for a quarter more forward matmul work, torchtitan's
    trade); recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in _MATMULS:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1
            if counts[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        if op in _SAVED_OPS:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy
