"""Gradient-norm clipping for a model split over a device mesh.

torch's ``clip_grad_norm_`` wants all gradients alike; a split model mixes plain tensors
(replicated layers), DTensors on different meshes (FSDP shards, tensor-parallel shards) and,
under pipeline parallel, holds only its stage. The norm here is the one a single process would
compute over the whole model, so clipping does not change with the plan.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, cast

import torch
import torch.distributed as dist

#: the attribute that marks a second copy of a tied weight (a pipeline's last stage holds the
#: embedding its first stage holds too). On the parameter itself: a weak reference to it (a
#: WeakIdKeyDictionary) makes ``module.to()`` fail ("Cannot swap t1 because it has weakref
#: associated with it") wherever torch swaps parameters on conversion
_DUPLICATE_MARK = "_xirang_duplicate"


def mark_duplicate(param: torch.nn.Parameter) -> None:
    """Count ``param``'s gradient once in the norm: it is a second copy of a tied weight
    (the pipeline's last stage), whose gradient the first copy's already holds."""
    setattr(param, _DUPLICATE_MARK, True)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float, mesh: Any) -> torch.Tensor:
    """Scale gradients so their global L2 norm is at most ``max_norm`` (``inf``: measure
    only); returns the norm, a tensor on the gradients' device. Nothing is read to the host
    (torchtitan's way): the scale is clamped on the device (``clip_grads_with_norm_``), and
    the loop reads the norm only at log steps."""
    grads = [p.grad for p in params if p.grad is not None and not _duplicate(p)]
    total_sq = _squared_norm(grads)
    if "pp" in (mesh.mesh_dim_names or ()) and mesh["pp"].size() > 1:
        dist.all_reduce(total_sq, group=mesh["pp"].get_group())  # stages hold disjoint layers
    norm = total_sq.sqrt()
    if math.isfinite(max_norm):
        with_grads = [p for p in params if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(with_grads, max_norm, norm, foreach=False)
    return norm


def _squared_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """Sum of squares, on the gradients' device: plain tensors locally (they are replicas),
    DTensors over their mesh."""
    from torch.distributed.tensor import DTensor

    device = grads[0].device if grads else torch.device("cpu")
    plain = [g for g in grads if not isinstance(g, DTensor)]
    total = sum((g.detach().float().pow(2).sum() for g in plain), torch.zeros((), device=device))
    by_layout: dict[Any, list[DTensor]] = defaultdict(list)
    for g in grads:
        if isinstance(g, DTensor):
            by_layout[(g.device_mesh, g.placements)].append(g)
    for group in by_layout.values():
        norm = torch.nn.utils.get_total_norm(group, norm_type=2.0)  # a DTensor for DTensors
        total = total + cast(DTensor, norm).full_tensor().float().pow(2)
    return total


def _duplicate(param: torch.nn.Parameter) -> bool:
    """A second copy of a tied weight (:func:`mark_duplicate`) is counted once."""
    return bool(getattr(param, _DUPLICATE_MARK, False))
