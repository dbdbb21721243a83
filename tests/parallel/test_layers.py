"""Pipeline stages' share of a layer stack, shared by every model family's split plan."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st
from xirang_planner.memory import stage_layer_count

from xirang_core.parallel.plan import stage_bounds


@given(st.integers(1, 40), st.integers(1, 8))
def test_stage_bounds_partition_layers_evenly(layers: int, stages: int) -> None:
    stages = min(stages, layers)
    bounds = [stage_bounds(layers, s, stages) for s in range(stages)]
    assert bounds[0][0] == 0 and bounds[-1][1] == layers
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes)
    assert sizes == [stage_layer_count(layers, s, stages) for s in range(stages)]
