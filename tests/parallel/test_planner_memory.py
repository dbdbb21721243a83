"""The planner's memory against what a worker really holds: DDP's buckets, the runtime beyond
tensors that this host's trivial runs measure and the allocator's slack that grows with a
micro-batch (xirang_planner.runtime_memory), and the real peak's baseline (.peak)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from xirang_planner.memory import per_layer_factor, predict_memory, stage_params
from xirang_planner.planner import rank_plans
from xirang_planner.runtime_memory import (
    KINDS,
    RuntimeMemory,
    cached_runtime,
    micro_batch_bytes,
    with_runtime,
)

from xirang.planning.memory_peak import RealPeak, _resettable
from xirang_core.parallel.cluster import ClusterShape
from xirang_core.parallel.plan import ModelShape, ParallelPlan, PlanError

SHAPE = ModelShape(layers=4, hidden=256, heads=4, vocab=1024, seq_len=128, params=3_400_000)
RUNTIME = RuntimeMemory(
    world=4,
    base=50 << 20,
    added={"fsdp": 12 << 20, "tp": 5 << 20, "pp": 4 << 20, "recompute": 3 << 20},
)
MIB = 1 << 20


@pytest.mark.parametrize(
    ("plan", "charged"),
    [
        (ParallelPlan(dp=4), 50),  # the baseline: plain data parallel
        (ParallelPlan(dp=4, zero=3), 62),
        (ParallelPlan(dp=2, tp=2, zero=1), 67),  # sharding and tensor parallel both add
        (ParallelPlan(pp=4), 54),
        (ParallelPlan(dp=2, pp=2), 54),
        (ParallelPlan(dp=4, recompute="full"), 53),  # checkpointing's own runtime
    ],
)
def test_a_plan_pays_the_baseline_and_what_each_of_its_kinds_adds(
    plan: ParallelPlan, charged: int
) -> None:
    assert RUNTIME.for_plan(plan) == charged * MIB
    estimate = with_runtime(predict_memory(SHAPE, plan, 16), RUNTIME, plan, SHAPE, 16)
    assert estimate.slack == 0  # RUNTIME measured no slack
    assert estimate.total == (
        estimate.tensors + estimate.buffers + estimate.recomputed + charged * MIB
    )


@given(
    tp=st.sampled_from([1, 2, 4]),
    sp=st.booleans(),
    micro_batch=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
)
def test_full_recompute_holds_one_rebuilt_layer_beside_its_kept_inputs(
    tp: int, sp: bool, micro_batch: int, pp: int
) -> None:
    """During a recomputed layer's backward its whole activations exist again, for one layer
    and one micro-batch, whatever the schedule; tensor accounting (what the meter sees) does
    not count them, the total does."""
    plan = ParallelPlan(dp=4 // (tp * pp) or 1, tp=tp, pp=pp, sp=sp, micro_batch=micro_batch)
    kept = predict_memory(SHAPE, replace(plan, recompute="full"), 16)
    stored = predict_memory(SHAPE, plan, 16)
    sbh = micro_batch * SHAPE.seq_len * SHAPE.hidden
    assert stored.recomputed == 0
    assert kept.recomputed == round(sbh * per_layer_factor(plan) * SHAPE.dtype_bytes)
    assert kept.total - kept.tensors - kept.buffers == kept.recomputed
    assert kept.activations < stored.activations  # recompute still saves memory overall


@given(
    dp=st.sampled_from([1, 2, 4]),
    tp=st.sampled_from([1, 2, 4]),
    zero=st.integers(0, 3),
)
def test_ddp_buckets_copy_every_gradient_fsdp_one_unit_each_way(
    dp: int, tp: int, zero: int
) -> None:
    plan = ParallelPlan(dp=dp, tp=tp, zero=zero)
    estimate = predict_memory(SHAPE, plan, 16)
    params = stage_params(SHAPE, plan, 0)
    unit = max(params.layer, params.root) * SHAPE.dtype_bytes  # FSDP copies one unit at a time
    if dp == 1:
        assert estimate.buffers == 0
    else:
        assert estimate.buffers == (params.total * SHAPE.dtype_bytes if zero == 0 else 2 * unit)


def test_a_plan_whose_tensors_fit_is_rejected_when_its_runtime_does_not() -> None:
    plan = ParallelPlan(dp=4, zero=3, micro_batch=4)
    tensors = predict_memory(SHAPE, plan, 16).total
    cluster = ClusterShape("t", "cpu", 1, 4, (tensors + 30 * MIB) / 2**30, 1.0, 10, 10, 50, 4)
    assert plan in {c.plan for c in rank_plans(SHAPE, cluster, 16, 4).candidates}
    sharding_costs = RuntimeMemory(world=4, base=0, added={"fsdp": 31 * MIB})
    ranking = rank_plans(SHAPE, cluster, 16, 4, runtime=sharding_costs)
    assert dict(ranking.rejected)[plan].startswith("needs")
    assert all(c.memory.runtime == sharding_costs.for_plan(c.plan) for c in ranking.candidates)
    with pytest.raises(PlanError, match=r"needs 2\d\d\.\d MiB"):  # the runtime named in the need
        rank_plans(SHAPE, cluster, 16, 4, runtime=replace(RUNTIME, base=200 * MIB))


@pytest.mark.slow
@pytest.mark.skipif(not _resettable(), reason="the kernel does not let this process reset VmHWM")
def test_predicted_memory_meets_the_real_peak_of_a_plan_the_calibration_never_ran(
    tiny_config: dict[str, Any],
) -> None:
    """Calibrated on one-layer trivial runs; held to a 2-layer ZeRO-3 plan's real peak."""
    from xirang_planner.runtime_memory import probe_plans

    from xirang.planning.smoke import run_plans
    from xirang_core.parallel.resolve import model_shape
    from xirang_core.plugins import get_registry

    runtime = cached_runtime(tiny_config, 2)
    shape = model_shape(tiny_config, get_registry())
    kinds = {"fsdp", "tp", "pp", "recompute", "tp+recompute"}  # pairs 2 workers can hold too
    assert runtime.base > 0 and set(runtime.added) == set(probe_plans(shape, 2)) - {"ddp"} >= kinds
    assert cached_runtime(tiny_config, 2) == runtime  # from the cache: measured once per host
    plan = ParallelPlan(dp=2, zero=3, micro_batch=2)
    found = run_plans(tiny_config, [plan], 3)[0]
    real = found.real_peak_bytes
    estimate = with_runtime(predict_memory(shape, plan, 8), runtime, plan, shape, 8)
    assert abs(estimate.total - real) / real <= 0.15
    assert abs(estimate.tensors - real) / real > 0.5  # the tensors alone miss most of it


@given(
    micro_batch=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
    recompute=st.sampled_from(["none", "full"]),
)
def test_the_allocator_slack_follows_one_micro_batch_not_how_many_are_in_flight(
    micro_batch: int, pp: int, schedule: str, recompute: str
) -> None:
    """Slack is charged per byte of the worst stage's single micro-batch beyond the baseline
    run's; a plan at the baseline's size pays none, and neither the schedule (micro-batches
    held at once) nor full recompute (which allocates the same activations, then frees them)
    changes it."""
    slack = replace(
        RUNTIME, slack_per_byte=0.5, slack_from=micro_batch_bytes(SHAPE, ParallelPlan(dp=4), 16)
    )
    plan = ParallelPlan(
        dp=4 // pp, pp=pp, micro_batch=micro_batch, schedule=schedule, recompute=recompute
    )
    estimate = with_runtime(predict_memory(SHAPE, plan, 16), slack, plan, SHAPE, 16)
    one = micro_batch_bytes(SHAPE, plan, 16)
    assert estimate.slack == round(0.5 * max(0.0, one - slack.slack_from))
    assert (
        estimate.total
        - with_runtime(predict_memory(SHAPE, plan, 16), RUNTIME, plan, SHAPE, 16).total
        == estimate.slack
    )
    for other in (replace(plan, schedule="gpipe"), replace(plan, recompute="none")):
        assert with_runtime(predict_memory(SHAPE, other, 16), slack, other, SHAPE, 16).slack == (
            estimate.slack
        )
    if pp == 1 and micro_batch == 1:
        assert estimate.slack == 0
    if estimate.slack > 0 and micro_batch > 1:  # a smaller micro-batch leaves less
        smaller = replace(plan, micro_batch=micro_batch // 2)
        assert slack.slack(micro_batch_bytes(SHAPE, smaller, 16)) < estimate.slack


@pytest.mark.skipif(not _resettable(), reason="the kernel does not let this process reset VmHWM")
def test_memory_freed_before_the_baseline_is_not_part_of_the_peak() -> None:
    """Freed heap memory malloc still keeps resident is handed back before the peak mark is
    reset: a run that allocates nothing reads no peak, however much was freed before."""
    size = 4000  # a variable: a constant would be folded into one shared object
    pinned = [b"x" * size for _ in range(16_000)]  # 64 MB on the heap, not from pymalloc
    del pinned[:-1]  # freed but resident: the last one keeps the heap's top in place
    peak = RealPeak("cpu")
    peak.start()
    assert peak.read()["allocated"] < 8 << 20


def test_a_plan_pays_what_each_pair_of_its_kinds_adds_and_only_those_pairs() -> None:
    paired = replace(RUNTIME, added={**RUNTIME.added, "tp+recompute": 6 << 20, "pp+fsdp": 1})
    both = ParallelPlan(dp=2, tp=2, recompute="full")
    assert paired.for_plan(both) == (50 + 5 + 3 + 6) * MIB
    assert paired.for_plan(ParallelPlan(dp=2, tp=2)) == (50 + 5) * MIB
    assert paired.for_plan(ParallelPlan(dp=2, pp=2, recompute="full")) == (50 + 4 + 3) * MIB


def test_the_runtime_probe_runs_each_pair_of_kinds_the_workers_can_hold() -> None:
    from xirang_planner.runtime_memory import probe_plans

    assert set(probe_plans(SHAPE, 4)) >= {"tp+pp", "fsdp+tp", "tp+recompute", "pp+recompute"}


@given(
    world=st.integers(1, 8),
    heads=st.sampled_from([1, 2, 3, 4, 6, 8]),
    kv_share=st.sampled_from([1, 2, 3, 4]),
    layers=st.integers(1, 8),
    splits=st.sampled_from([("tp", "pp"), ("tp",), ("pp",), ()]),
)
def test_every_runtime_probe_is_a_valid_plan_and_charges_every_kind_a_plan_can_combine(
    world: int, heads: int, kv_share: int, layers: int, splits: tuple[str, ...]
) -> None:
    """The runtime's trivial runs are plans the strategies accept (tensor parallel over 2 of 4
    workers beside data parallel without sharding is refused: llama_tiny's 2 key/value heads on
    4 workers), fewest kinds first, and whatever kinds and pairs a candidate plan combines
    are measured by some probe, so ``for_plan`` charges each of them."""
    from xirang_planner.runtime_memory import plan_kinds, probe_plans

    from xirang_core.parallel.plan import candidate_plans, plan_problem

    kv_heads = heads // kv_share if heads % kv_share == 0 else heads
    shape = replace(SHAPE, heads=heads, kv_heads=kv_heads, layers=layers, splits=splits)
    plans = probe_plans(shape, world)
    held = {name: plan_kinds(plan) - {"ddp"} for name, plan in plans.items()}
    assert next(iter(plans)) == "ddp" and plans["ddp"] == ParallelPlan(dp=world)
    for name, plan in plans.items():
        trivial = replace(shape, layers=plan.pp)  # one layer per stage, micro-batch 1
        assert plan.world == world and not plan_problem(plan, trivial, plan.dp * plan.pp), name
        assert set(name.split("+")) - {"ddp"} <= held[name]
    assert [len(kinds) for kinds in held.values()] == sorted(len(k) for k in held.values())
    for plan in candidate_plans(world, shape, 8 * world, (1,)):
        kinds = plan_kinds(plan) - {"ddp"}
        assert kinds <= set(plans)
        for a, b in itertools.combinations(sorted(kinds, key=KINDS.index), 2):
            assert f"{a}+{b}" in plans or any({a, b} <= held[k] for k in kinds), (plan, a, b)


def test_each_kind_counts_beyond_a_repeated_plain_run_and_slack_per_micro_batch_byte() -> None:
    """Every trivial run after the first re-faults the heap its trimmed predecessors freed
    (the ``slack-small`` control reads it): a kind is charged only what it adds beyond that,
    and the slack is the control's rise at the larger micro-batch per byte."""
    from xirang_planner.runtime_memory import derive_runtime

    beyond = {"ddp": 50 * MIB, "tp": 7 * MIB, "pp": 2 * MIB, "slack-small": 3 * MIB}
    acts = {"ddp": MIB, "tp": MIB, "pp": MIB, "slack-small": MIB, "slack-large": 9 * MIB}
    found = derive_runtime(4, {**beyond, "slack-large": 7 * MIB}, acts)
    assert (found.base, found.added) == (50 * MIB, {"tp": 4 * MIB, "pp": 0})
    assert found.slack_per_byte == 0.5 and found.slack(5 * MIB) == 2 * MIB
