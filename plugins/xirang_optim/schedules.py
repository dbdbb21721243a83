"""The built-in learning-rate schedules, each an :class:`xirang.specs.LRSchedule`.

Every one warms up linearly from 0 to ``optim.lr`` over ``optim.warmup_steps`` steps; they
differ in what follows: cosine or linear decay to ``optim.min_lr`` at the last step, a constant
rate, or warmup-stable-decay (a constant rate, then a linear decay over the last
``schedule.decay_fraction`` of the steps, so the stable phase's checkpoints can be decayed and
continued from)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xirang import ConfigError


def warmup(step: int, optim: Mapping[str, Any]) -> float | None:
    """The warm-up's rate at ``step``, or None once it is over."""
    if step <= optim["warmup_steps"]:
        return optim["lr"] * step / max(optim["warmup_steps"], 1)
    return None


def decayed(progress: float, optim: Mapping[str, Any], shape: str = "linear") -> float:
    """From ``optim.lr`` (progress 0) down to ``optim.min_lr`` (progress 1)."""
    lr, min_lr, progress = optim["lr"], optim["min_lr"], min(max(progress, 0.0), 1.0)
    if shape == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))
    return lr - (lr - min_lr) * progress


class WarmupCosine:
    """Linear warm-up to ``optim.lr``, then cosine decay to ``optim.min_lr`` at the last step."""

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        warm = warmup(step, optim)
        if warm is not None:
            return warm
        after = step - optim["warmup_steps"]
        return decayed(after / max(max_steps - optim["warmup_steps"], 1), optim, "cosine")


class WarmupLinear:
    """Linear warm-up to ``optim.lr``, then linear decay to ``optim.min_lr`` at the last step
    (the Hugging Face Trainer's default ``linear``, which decays to 0: set optim.min_lr=0)."""

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        warm = warmup(step, optim)
        if warm is not None:
            return warm
        after = step - optim["warmup_steps"]
        return decayed(after / max(max_steps - optim["warmup_steps"], 1), optim)


class WarmupConstant:
    """Linear warm-up to ``optim.lr``, then ``optim.lr`` to the end (``optim.min_lr`` unused)."""

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        warm = warmup(step, optim)
        return optim["lr"] if warm is None else warm


@dataclass
class WSDConfig:
    """``schedule=wsd``: the share of all steps the final decay takes."""

    decay_fraction: float = 0.2

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """A decay over no steps, or more than all of them, is refused at compose."""
        fraction = settings["decay_fraction"]
        if not 0 < fraction <= 1:
            raise ConfigError(
                f"schedule.decay_fraction={fraction}: must be in (0, 1], the share of "
                f"trainer.max_steps the final decay takes (e.g. 0.2 for the last 20%)"
            )
        return settings


class WarmupStableDecay:
    """Warmup-stable-decay (MiniCPM, Hägele et al. 2024): linear warm-up to ``optim.lr``, the
    constant ``optim.lr``, then a linear decay to ``optim.min_lr`` over the last
    ``decay_fraction`` of the steps (``round(max_steps * decay_fraction)``, at least one)."""

    def __init__(self, decay_fraction: float = 0.2) -> None:
        self.decay_fraction = decay_fraction

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        warm = warmup(step, optim)
        if warm is not None:
            return warm
        decay_steps = max(round(max_steps * self.decay_fraction), 1)
        start = max(max_steps - decay_steps, optim["warmup_steps"])
        if step <= start:
            return optim["lr"]
        return decayed((step - start) / max(max_steps - start, 1), optim)
