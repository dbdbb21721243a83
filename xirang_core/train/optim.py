"""Optimizer and learning-rate schedule (linear warm-up, cosine decay to ``min_lr``)."""

from __future__ import annotations

import math
from typing import Any

import torch

from xirang_core.errors import ConfigError

OPTIMIZERS = ("adamw", "sgd")


def build_optimizer(model: torch.nn.Module, optim: dict[str, Any]) -> torch.optim.Optimizer:
    """Weight decay applies to matrices only; norms, biases and embeddings' vectors are exempt."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": optim["weight_decay"]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    if optim["name"] == "adamw":
        return torch.optim.AdamW(
            groups, lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), fused=False
        )
    if optim["name"] == "sgd":
        return torch.optim.SGD(groups, lr=optim["lr"], momentum=optim["beta1"])
    raise ConfigError(f"optim.name={optim['name']!r}: valid optimizers are {', '.join(OPTIMIZERS)}")


def lr_at(step: int, max_steps: int, optim: dict[str, Any]) -> float:
    """Learning rate for a 1-based ``step``."""
    lr, min_lr, warmup = optim["lr"], optim["min_lr"], optim["warmup_steps"]
    if step <= warmup:
        return lr * step / max(warmup, 1)
    progress = (step - warmup) / max(max_steps - warmup, 1)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))
