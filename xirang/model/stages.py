"""Pipeline stages of uneven size (``parallel.stage_layers``): keep one stage's given layer
range. The balanced split is :func:`xirang.model.layers.keep_stage_layers`; a
planner that puts stages on devices of unequal speed or memory gives each its own count."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def keep_layers(layers: MutableMapping[str, Any], lo: int, hi: int) -> tuple[int, int]:
    """Delete every layer outside ``[lo, hi)`` (by position); the kept ones keep their
    whole-model names, so checkpoints line up across splits, even or not."""
    names = list(layers.keys())
    if not 0 <= lo < hi <= len(names):
        raise ValueError(f"layer range [{lo}, {hi}) is not inside the model's {len(names)} layers")
    for name in names[:lo] + names[hi:]:
        del layers[name]
    return lo, hi
