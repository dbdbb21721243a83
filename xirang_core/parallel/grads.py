"""Gradient-norm clipping for a model split over a device mesh.

torch's ``clip_grad_norm_`` wants all gradients alike; a split model mixes plain tensors
(replicated layers), DTensors on different meshes (FSDP shards, tensor-parallel shards) and,
under pipeline parallel, holds only its stage. The norm here is the one a single process would
compute over the whole model, so clipping does not change with the plan.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float, mesh: Any) -> float:
    """Scale gradients so their global L2 norm is at most ``max_norm``; returns the norm."""
    grads = [p.grad for p in params if p.grad is not None and not _duplicate(p)]
    total_sq = _squared_norm(grads)
    if "pp" in (mesh.mesh_dim_names or ()) and mesh["pp"].size() > 1:
        dist.all_reduce(total_sq, group=mesh["pp"].get_group())  # stages hold disjoint layers
    norm = float(total_sq.sqrt())
    coef = max_norm / (norm + 1e-6)
    if coef < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


def _squared_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """Sum of squares: plain tensors locally (they are replicas), DTensors over their mesh."""
    from torch.distributed.tensor import DTensor

    plain = [g for g in grads if not isinstance(g, DTensor)]
    total = sum((g.detach().float().pow(2).sum() for g in plain), torch.zeros(()))
    by_layout: dict[Any, list[DTensor]] = defaultdict(list)
    for g in grads:
        if isinstance(g, DTensor):
            by_layout[(g.device_mesh, g.placements)].append(g)
    for group in by_layout.values():
        norm = torch.nn.utils.get_total_norm(group, norm_type=2.0)
        total = total + norm.full_tensor().float().pow(2).cpu()
    return total.to(grads[0].device if grads else "cpu")


def _duplicate(param: torch.nn.Parameter) -> bool:
    """A second copy of a tied weight (the pipeline's last stage) is counted once."""
    return getattr(param, "_xirang_duplicate", False)
