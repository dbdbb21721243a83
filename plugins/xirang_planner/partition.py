"""Pipeline stage boundaries for stages of unequal speed and memory: which contiguous layers
each stage runs so that the slowest stage is as fast as it can be.

A 1F1B step of ``m`` micro-batches takes ``m`` times the slowest stage's micro-batch (plus one
of each other stage to fill and drain), so the split that matters minimises the maximum stage
time. Stage ``s`` running layers ``[i, j)`` takes ``rate_s · (work_i + ... + work_{j-1}) +
per_layer_s · (j - i) + fixed_s`` seconds: work in FLOPs over the device's rate, collectives per
layer, and the embeddings (first stage) or head (last stage) as fixed costs; it holds at most
``capacity_s`` layers (what its memory allows, :mod:`xirang_planner.mixed`).

Dynamic programming over prefixes: ``best[s][j]`` is the least possible slowest-stage time of
stages ``0..s`` covering layers ``[0, j)``; ``best[s][j] = min_i max(best[s-1][i], t_s(i, j))``.
``O(S · L²)`` for ``S`` stages and ``L`` layers (80 layers over 40 stages: a few
milliseconds), and optimal, which the tests hold against every split of small cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Slot:
    """One pipeline stage's device, as the partition sees it."""

    rate: float  # seconds per unit of layer work (per FLOP: 1 / the device's FLOP/s)
    per_layer: float = 0.0  # seconds each layer adds beyond its work (its collectives)
    fixed: float = 0.0  # seconds of the stage's own parts (embeddings, head)
    capacity: int = 1 << 30  # the most layers its memory holds

    def seconds(self, work: float, layers: int) -> float:
        """The stage's time for ``layers`` layers of ``work`` in all."""
        return self.rate * work + self.per_layer * layers + self.fixed


def partition(work: Sequence[float], slots: Sequence[Slot]) -> tuple[int, ...] | None:
    """Layers per stage, first to last, each at least one, minimising the slowest stage's
    time with no stage beyond its capacity; None when no split fits (too few layers for the
    stages, or too little memory for the layers)."""
    layers, stages = len(work), len(slots)
    if stages == 0 or stages > layers:
        return None
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(work, dtype=float))])
    index = np.arange(layers + 1)
    span = index[None, :] - index[:, None]  # span[i, j]: layers in [i, j)
    summed = prefix[None, :] - prefix[:, None]
    best = np.full(layers + 1, np.inf)
    best[0] = 0.0
    starts = np.zeros((stages, layers + 1), dtype=int)
    for s, slot in enumerate(slots):
        cost = slot.rate * summed + slot.per_layer * span + slot.fixed
        cost[(span < 1) | (span > slot.capacity)] = np.inf
        total = np.maximum(best[:, None], cost)
        starts[s] = np.argmin(total, axis=0)
        best = total[starts[s], index]
    if not np.isfinite(best[layers]):
        return None
    counts, end = [], layers
    for s in reversed(range(stages)):
        start = int(starts[s][end])
        counts.append(end - start)
        end = start
    return tuple(reversed(counts))


def slowest(work: Sequence[float], slots: Sequence[Slot], counts: Sequence[int]) -> float:
    """The slowest stage's time under the split ``counts``."""
    times, start = [], 0
    for slot, count in zip(slots, counts, strict=True):
        times.append(slot.seconds(sum(work[start : start + count]), count))
        start += count
    return max(times)
