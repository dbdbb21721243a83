"""Optimizer and learning-rate schedule (linear warm-up, cosine decay to ``min_lr``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from xirang_core.config import OPTIMIZERS
from xirang_core.errors import ConfigError


def build_optimizer(model: torch.nn.Module, optim: dict[str, Any]) -> torch.optim.Optimizer:
    """Weight decay applies to matrices only; norms, biases and embeddings' vectors are exempt."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": optim["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    impl = implementation(params)
    if optim["name"] == "adamw":
        return torch.optim.AdamW(
            groups, lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), **impl
        )
    if optim["name"] == "sgd":
        return torch.optim.SGD(groups, lr=optim["lr"], momentum=optim["beta1"], **impl)
    raise ConfigError(f"optim.name={optim['name']!r}: valid optimizers are {', '.join(OPTIMIZERS)}")


#: device types whose fused optimizer kernels xirang uses
FUSED_DEVICES = ("cuda", "cpu")


def implementation(params: list[torch.Tensor]) -> dict[str, bool]:
    """``fused=True`` (one kernel per step over all parameters) where every parameter is a plain
    tensor on a device with fused kernels; ``foreach=True`` (batched ops, DTensor-aware) else.

    Sharded and tensor-parallel parameters (DTensors) take foreach: its per-element arithmetic
    is the single-process update's, so a split run keeps training like one process."""
    from torch.distributed.tensor import DTensor

    plain = not any(isinstance(p, DTensor) for p in params)
    if params and plain and all(p.device.type in FUSED_DEVICES for p in params):
        return {"fused": True}
    return {"foreach": True}


def lr_at(step: int, max_steps: int, optim: dict[str, Any]) -> float:
    """Learning rate for a 1-based ``step``."""
    lr, min_lr, warmup = optim["lr"], optim["min_lr"], optim["warmup_steps"]
    if step <= warmup:
        return lr * step / max(warmup, 1)
    progress = (step - warmup) / max(max_steps - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))
