"""Measuring this host for the planner: two real gloo workers, the tiny GPT."""

from __future__ import annotations

from typing import Any

import pytest
from xirang_planner.calibrate import (
    PROBE_PIPELINE_MICRO,
    HostProfile,
    StageCost,
    _action_overhead,
    compute_slots,
    measure_host,
)
from xirang_planner.planner import rank_plans
from xirang_planner.timing import predict_time

from xirang.comm.cost_model import Link
from xirang_core.parallel.cluster import local_cluster
from xirang_core.parallel.plan import ModelShape, ParallelPlan
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
    assert host.pipeline_action_s > 0  # torch's schedule costs processor time of its own
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


LINK = Link(1e-4, 1e9)


def _host(slots: float, action_s: float = 0.0) -> HostProfile:
    cost = StageCost(0.001, 0.002)
    return HostProfile(
        world=2,
        slots=slots,
        layer={1: cost},
        rest={1: cost},
        layer_fixed=0.0,
        optimizer_s_per_param=0.0,
        links={2: LINK},
        p2p=LINK,
        pipeline_action_s=action_s,
    )


def test_the_schedules_own_processor_time_is_what_a_stage_spends_beyond_its_layer() -> None:
    layer = 8 * (0.001 + 0.002)  # the probe's micro-batches through one layer
    assert PROBE_PIPELINE_MICRO == 8
    assert _action_overhead(_host(2.0), layer + 16 * 0.0005) == pytest.approx(0.0005)
    assert _action_overhead(_host(2.0), layer / 2) == 0.0  # never below nothing


@pytest.mark.parametrize("slots", [2.0, 1.0])
def test_a_pipelines_schedule_work_takes_cores_as_compute_does(slots: float) -> None:
    """Each of a stage's actions costs the schedule's own time on top of its layers; on a host
    whose cores the stages share that time is taken from the others (charged as compute), and
    a plan without a pipeline pays none of it."""
    shape = ModelShape(layers=2, hidden=64, heads=4, vocab=500, seq_len=32, params=300_000)
    cluster, action, batch = local_cluster(2), 0.004, 8
    pipeline, replicas = ParallelPlan(pp=2, micro_batch=1), ParallelPlan(dp=2, micro_batch=1)
    for plan in (pipeline, replicas):
        base = predict_time(shape, plan, batch, cluster, _host(slots))
        busy = predict_time(shape, plan, batch, cluster, _host(slots, action))
        if plan is replicas:
            assert busy == base
            continue
        added = batch * 2 * action  # a forward and a backward action per micro-batch
        assert busy.compute - base.compute == pytest.approx(added * 2 / slots)
        assert busy.total - base.total >= added
