"""Measuring this host for the planner: two real gloo workers, the tiny GPT."""

from __future__ import annotations

from typing import Any

import pytest
from xirang_planner.calibrate import compute_slots, measure_host
from xirang_planner.planner import rank_plans
from xirang_planner.timing import predict_time

from xirang_core.parallel.cluster import local_cluster
from xirang_core.parallel.plan import ParallelPlan
from xirang_core.parallel.resolve import model_shape
from xirang_core.plugins import get_registry


@pytest.mark.slow
def test_host_measured_and_used_by_the_planner(tiny_config: dict[str, Any]) -> None:
    host = measure_host(tiny_config, 2, [1, 2])
    assert 1.0 <= host.slots <= 2.0
    assert all(c.forward > 0 and c.forward + c.backward > 0 for c in host.layer.values())
    assert set(host.layer) == set(host.rest) == {1, 2}
    assert set(host.links) == {2} and host.p2p.latency_s > 0
    assert set(host.tp_model) == {(2, False), (2, True)}  # 2 heads, sequence 16: both splits
    shape = model_shape(tiny_config, get_registry())
    cluster = local_cluster(2)
    for plan in (ParallelPlan(dp=2, micro_batch=2), ParallelPlan(tp=2, micro_batch=2)):
        t = predict_time(shape, plan, 8, cluster, host)
        assert t.compute > 0 and t.total >= t.compute
    ranking = rank_plans(shape, cluster, 8, 2, host)
    speeds = [c.tokens_per_s for c in ranking.candidates]
    assert speeds == sorted(speeds, reverse=True)


@pytest.mark.parametrize(
    ("world", "alone", "together", "cores", "slots"),
    [
        (4, 1.0, 2.0, 2, 2.0),  # 4 workers on 2 free cores take twice as long
        (4, 1.0, 2.5, 2, 1.6),  # outside load leaves fewer cores
        (4, 1.0, 1.8, 2, 2.0),  # more than the cores: the lone run was slow, not extra cores
        (2, 1.0, 0.9, 8, 2.0),  # never more than the workers
        (4, 1.0, 9.0, 2, 1.0),  # at least one
    ],
)
def test_workers_computing_at_once_stay_within_workers_and_cores(
    world: int, alone: float, together: float, cores: int, slots: float
) -> None:
    assert compute_slots(world, alone, together, cores) == pytest.approx(slots)
