"""The stage partition is optimal: on small cases its slowest stage is the least over every
contiguous split (brute force), no stage holds more layers than its memory allows, and it
finds a split whenever one exists."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_planner.partition import Slot, partition, slowest

rates = st.floats(min_value=0.1, max_value=10.0)
slot = st.builds(
    Slot,
    rate=rates,
    per_layer=st.floats(min_value=0.0, max_value=2.0),
    fixed=st.floats(min_value=0.0, max_value=20.0),
    capacity=st.integers(min_value=1, max_value=9),
)


def every_split(layers: int, stages: int) -> list[tuple[int, ...]]:
    """Every way to cut ``layers`` into ``stages`` contiguous non-empty runs."""
    cuts = itertools.combinations(range(1, layers), stages - 1)
    return [tuple(b - a for a, b in zip((0, *c), (*c, layers), strict=True)) for c in cuts]


@settings(max_examples=300, deadline=None)
@given(
    work=st.lists(st.floats(min_value=0.5, max_value=50.0), min_size=1, max_size=9),
    slots=st.lists(slot, min_size=1, max_size=4),
)
def test_the_partition_is_the_best_contiguous_split(work: list[float], slots: list[Slot]) -> None:
    fitting = [
        split
        for split in every_split(len(work), len(slots))
        if all(n <= s.capacity for n, s in zip(split, slots, strict=True))
    ]
    found = partition(work, slots)
    if not fitting:
        assert found is None
        return
    assert found is not None and sum(found) == len(work) and min(found) >= 1
    assert all(n <= s.capacity for n, s in zip(found, slots, strict=True))
    best = min(slowest(work, slots, split) for split in fitting)
    assert math.isclose(slowest(work, slots, found), best, rel_tol=1e-9, abs_tol=1e-12)


def test_a_faster_stage_takes_more_layers_and_the_head_stage_fewer() -> None:
    # a device 3x as fast as the other, 16 equal layers: 12 and 4 balance them
    assert partition([1.0] * 16, [Slot(rate=1 / 3), Slot(rate=1.0)]) == (12, 4)
    # equal devices, the last stage also runs the head (2 layers' worth): it takes 2 fewer
    assert partition([1.0] * 10, [Slot(rate=1.0), Slot(rate=1.0, fixed=2.0)]) == (6, 4)


def test_memory_caps_a_stage_even_when_it_is_the_fastest() -> None:
    split = partition([1.0] * 16, [Slot(rate=0.1, capacity=5), Slot(rate=1.0)])
    assert split == (5, 11)


def test_no_split_when_the_stages_cannot_hold_the_layers() -> None:
    assert partition([1.0] * 10, [Slot(rate=1.0, capacity=4), Slot(rate=1.0, capacity=5)]) is None
    assert partition([1.0] * 2, [Slot(rate=1.0)] * 3) is None  # more stages than layers
