"""The default learning-rate schedule, an :class:`xirang.specs.LRSchedule`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


class WarmupCosine:
    """Linear warm-up to ``optim.lr``, then cosine decay to ``optim.min_lr`` at the last step."""

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        lr, min_lr, warmup = optim["lr"], optim["min_lr"], optim["warmup_steps"]
        if step <= warmup:
            return lr * step / max(warmup, 1)
        progress = (step - warmup) / max(max_steps - warmup, 1)
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))
