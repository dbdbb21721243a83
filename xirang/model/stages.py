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


def keep_stage(
    layers: Any, stage: int, stages: int, bounds: tuple[int, int] | None = None
) -> tuple[int, int]:
    """Keep only ``stage``'s contiguous share of ``layers``: the given ``bounds`` (an uneven
    split, ``parallel.stage_layers``) or the balanced split. Returns the kept layer range; a
    family's ``split_stage`` then drops the embeddings, norm and head its stage does not run."""
    from xirang.model.layers import keep_stage_layers

    return keep_layers(layers, *bounds) if bounds else keep_stage_layers(layers, stage, stages)
