"""Plans: degrees fill and check, impossible plans refused with the nearest valid ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_core.parallel.plan import (
    ModelShape,
    ParallelPlan,
    PlanError,
    candidate_plans,
    check_plan,
    plan_problem,
    resolve_degrees,
)

SHAPE = ModelShape(layers=8, hidden=256, heads=8, vocab=1000, seq_len=128, params=7_000_000)


def test_zero_degree_takes_the_rest() -> None:
    assert resolve_degrees(0, 2, 2, 8) == (2, 2, 2)
    assert resolve_degrees(1, 0, 1, 4) == (1, 4, 1)


def test_world_not_a_product_is_refused_with_valid_splits() -> None:
    with pytest.raises(PlanError, match=r"not dp x tp x pp.*Valid splits of 8"):
        resolve_degrees(2, 2, 1, 8)
    with pytest.raises(PlanError, match="only one of dp, tp, pp may be 0"):
        resolve_degrees(0, 0, 1, 8)


def test_tp_not_dividing_heads_is_refused_with_nearest_plans() -> None:
    plan = ParallelPlan(dp=1, tp=3, pp=1, micro_batch=2)
    with pytest.raises(PlanError) as err:
        check_plan(plan, SHAPE, global_batch=12)
    message = str(err.value)
    assert "tp=3 does not divide the 8 heads" in message
    assert "Nearest valid plans: dp1xtp1xpp3" in message or "dp3xtp1xpp1" in message


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (ParallelPlan(tp=2, sp=True, micro_batch=1), ""),
        (ParallelPlan(sp=True), "sp) needs tp > 1"),
        (ParallelPlan(pp=16), "exceeds the 8 layers"),
        (ParallelPlan(dp=2, tp=2, zero=0), "needs zero >= 1"),
        (ParallelPlan(pp=4, micro_batch=8), "1f1b needs at least pp=4 micro-batches"),
        (ParallelPlan(dp=3), "not a multiple of dp x micro_batch"),
    ],
)
def test_plan_problems(plan: ParallelPlan, why: str) -> None:
    assert why in plan_problem(plan, SHAPE, global_batch=16) if why else True
    assert bool(plan_problem(plan, SHAPE, 16)) == bool(why)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4, 6, 8]), st.sampled_from([8, 16, 32]))
def test_every_candidate_is_valid_and_keeps_the_batch(world: int, global_batch: int) -> None:
    for plan in candidate_plans(world, SHAPE, global_batch):
        assert plan.world == world
        assert plan_problem(plan, SHAPE, global_batch) == ""
        assert plan.dp * plan.micro_batch * plan.micro_batches(global_batch) == global_batch


def test_strategy_names_and_settings_round_trip() -> None:
    assert ParallelPlan().strategy() == "single"
    assert ParallelPlan(dp=4).strategy() == "ddp"
    assert ParallelPlan(dp=4, zero=3).strategy() == "fsdp"
    assert ParallelPlan(tp=4, sp=True).strategy() == "sp"
    assert ParallelPlan(pp=2).strategy() == "pp"
    hybrid = ParallelPlan(dp=2, tp=2, zero=2).settings()
    assert hybrid["name"] == "hybrid" and (hybrid["dp"], hybrid["tp"]) == (2, 2)


def test_a_recompute_plan_without_a_split_runs_a_strategy_that_recomputes() -> None:
    """``single`` and ``ddp`` take no ``recompute``: such a plan would run without it while
    the planner charged its memory and time as recomputed."""
    for plan in (ParallelPlan(recompute="full"), ParallelPlan(dp=4, recompute="full")):
        settings = plan.settings()
        assert settings["name"] == "hybrid" and settings["recompute"] == "full"
        assert (settings["dp"], settings["tp"], settings["pp"]) == (plan.dp, 1, 1)
    assert ParallelPlan(dp=4, zero=3, recompute="full").settings()["name"] == "fsdp"
