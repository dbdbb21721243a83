"""The data-parallel wrappers' measured costs: derived from timings, and charged by the host
time model where the plan's wrapper pays them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from xirang_planner.calibrate import HostProfile, StageCost
from xirang_planner.timing import predict_time
from xirang_planner.wrapper_costs import GROUP, WrapperCosts, derive

from xirang.comm.cost_model import Link, ring_time
from xirang_core.parallel.cluster import local_cluster
from xirang_core.parallel.plan import ModelShape, ParallelPlan

LINK = Link(1e-4, 1e9)
SHAPE = ModelShape(layers=4, hidden=64, heads=4, vocab=500, seq_len=32, params=300_000)


def _timings(per_micro: float, per_step: float) -> dict[int, float]:
    return {m: per_step + per_micro * m for m in (1, 2, 4)}


def test_primitives_are_the_differences_beyond_ring_time() -> None:
    nbytes, params, optimizer = 400_000, 100_000, 1e-8
    found = {
        "plain": _timings(0.010, 0.002),
        "fsdp": _timings(0.011, 0.020),
        "regather": _timings(0.015, 0.020),
        "ddp": _timings(0.012, 0.006),
        "root_plain": _timings(0.003, 0.001),
        "root_fsdp": _timings(0.0035, 0.006),
        "bytes": nbytes,
        "params": params,
        "root_bytes": nbytes * 2,
        "root_params": params * 2,
    }
    costs = derive(found, LINK, optimizer)
    gather = ring_time("all_gather", nbytes, GROUP, LINK)
    scatter = ring_time("reduce_scatter", nbytes, GROUP, LINK)
    sharded_optimizer = optimizer * params * (1 - 1 / GROUP)
    assert costs.fsdp_hook_s == pytest.approx(0.001)
    assert costs.fsdp_call_s == pytest.approx((0.018 + sharded_optimizer - gather - scatter) / 2)
    assert costs.fsdp_regather_s == pytest.approx(0.004 - gather)
    root_gather = ring_time("all_gather", 2 * nbytes, GROUP, LINK)
    root_scatter = ring_time("reduce_scatter", 2 * nbytes, GROUP, LINK)
    root_step = 0.005 + 2 * sharded_optimizer
    assert costs.fsdp_root_hook_s == pytest.approx(0.0005)
    assert costs.fsdp_root_call_s == pytest.approx((root_step - root_gather - root_scatter) / 2)
    assert costs.ddp_micro_s == pytest.approx(0.002)
    assert costs.ddp_step_s == pytest.approx(0.004 - ring_time("all_reduce", nbytes, 2, LINK))


def test_a_wrapper_faster_than_plain_costs_nothing() -> None:
    same = _timings(0.01, 0.01)
    found = {k: same for k in ("plain", "fsdp", "regather", "ddp", "root_plain", "root_fsdp")}
    sizes = {"bytes": 4, "params": 1, "root_bytes": 4, "root_params": 1}
    costs = derive({**found, **sizes}, LINK, 0.0)
    assert costs == WrapperCosts()


def _host(wrappers: WrapperCosts) -> HostProfile:
    cost = StageCost(0.001, 0.002)
    return HostProfile(
        world=4,
        slots=4.0,
        layer={1: cost, 2: cost.scaled(2)},
        rest={1: cost, 2: cost.scaled(2)},
        layer_fixed=0.0,
        optimizer_s_per_param=1e-9,
        links={2: LINK, 4: LINK},
        p2p=LINK,
        wrappers=wrappers,
    )


@pytest.mark.parametrize(
    ("plan", "field"),
    [
        (ParallelPlan(dp=2, pp=2, zero=1, micro_batch=1, schedule="gpipe"), "fsdp_call_s"),
        (ParallelPlan(dp=2, pp=2, zero=3, micro_batch=1), "fsdp_regather_s"),
        (ParallelPlan(dp=4, zero=2, micro_batch=1), "fsdp_hook_s"),
        (ParallelPlan(dp=4, zero=2, micro_batch=1), "fsdp_root_hook_s"),
        (ParallelPlan(dp=2, pp=2, zero=2, micro_batch=2), "fsdp_root_call_s"),
        (ParallelPlan(dp=2, pp=2, zero=0, micro_batch=1), "ddp_micro_s"),
        (ParallelPlan(dp=4, zero=0, micro_batch=2), "ddp_step_s"),
    ],
)
def test_each_measured_cost_lengthens_the_plans_that_pay_it(plan: ParallelPlan, field: str) -> None:
    cluster = local_cluster(4)
    base = predict_time(SHAPE, plan, 8, cluster, _host(WrapperCosts())).total
    costly = _host(replace(WrapperCosts(), **{field: 0.01}))
    assert predict_time(SHAPE, plan, 8, cluster, costly).total > base + 0.005


def test_plans_without_data_parallel_pay_no_wrapper() -> None:
    plan = ParallelPlan(pp=4, micro_batch=1)
    everything = WrapperCosts(*(0.01,) * len(WrapperCosts.__dataclass_fields__))
    cluster = local_cluster(4)
    plain = predict_time(SHAPE, plan, 8, cluster, _host(WrapperCosts())).total
    assert predict_time(SHAPE, plan, 8, cluster, _host(everything)).total == pytest.approx(plain)
