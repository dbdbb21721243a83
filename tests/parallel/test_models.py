"""Memory and time models: the published formulas, and the planner's rules and ranking."""

from __future__ import annotations

import json

import pytest
from xirang_planner.clusters import load_cluster
from xirang_planner.memory import per_layer_factor, predict_memory, stage_params
from xirang_planner.planner import rank_plans
from xirang_planner.timing import flops_per_token, predict_time, stage_seconds

from xirang_core.parallel.cluster import ClusterShape
from xirang_core.parallel.plan import ModelShape, ParallelPlan, PlanError

SHAPE = ModelShape(layers=8, hidden=512, heads=8, vocab=32000, seq_len=512, params=0)
NODE = ClusterShape(
    "test",
    "gpu",
    nodes=2,
    devices_per_node=4,
    memory_gb=16,
    tflops=100,
    intra_gbps=200,
    inter_gbps=20,
    latency_us=5,
    dtype_bytes=4,
)


def states(plan: ParallelPlan) -> int:
    m = predict_memory(SHAPE, plan, global_batch=32)
    return m.params + m.grads + m.optimizer


def test_zero_model_states_follow_rajbhandari() -> None:
    """fp32 Adam: 16 bytes per parameter replicated; ZeRO-3 divides all of it by d."""
    psi = stage_params(SHAPE, ParallelPlan(), 0).total
    assert states(ParallelPlan(dp=8)) == 16 * psi
    assert states(ParallelPlan(dp=8, zero=3)) == pytest.approx(16 * psi / 8, rel=1e-6)
    assert states(ParallelPlan(dp=8, zero=2)) == states(ParallelPlan(dp=8, zero=3))
    assert states(ParallelPlan(dp=8, zero=1)) > states(ParallelPlan(dp=8, zero=2))


def test_activation_factors_follow_korthikanti() -> None:
    assert per_layer_factor(ParallelPlan()) == 16
    assert per_layer_factor(ParallelPlan(tp=4)) == 4 + 12 / 4
    assert per_layer_factor(ParallelPlan(tp=4, sp=True)) == 2 + 14 / 4
    assert per_layer_factor(ParallelPlan(recompute="full")) == 1


def test_memory_counts_activations_and_logits_not_just_states() -> None:
    m = predict_memory(SHAPE, ParallelPlan(micro_batch=4), global_batch=32)
    logits = 4 * 512 * 32000 * 4
    assert m.activations > logits  # the softmax output alone is 256 MiB here
    gpipe = predict_memory(SHAPE, ParallelPlan(pp=2, micro_batch=4, schedule="gpipe"), 32)
    ofb = predict_memory(SHAPE, ParallelPlan(pp=2, micro_batch=4), 32)
    assert gpipe.activations > ofb.activations  # GPipe holds every micro-batch


def test_bubble_is_p_minus_one_over_m() -> None:
    plan = ParallelPlan(pp=4, micro_batch=1)
    t = predict_time(SHAPE, plan, global_batch=16, cluster=NODE)
    assert t.bubble == pytest.approx(t.compute * 3 / 16)


def test_unequal_stages_wait_for_the_slowest_and_fill_with_the_others() -> None:
    """1F1B over m micro-batches: m of the slowest stage, one of each other (fill, drain)."""
    shape = ModelShape(layers=8, hidden=512, heads=8, vocab=32000, seq_len=512, params=10**8)
    plan = ParallelPlan(pp=2, micro_batch=1, stage_layers=(6, 2))
    first, last = (stage_seconds(shape, plan, s, NODE).compute for s in (0, 1))
    assert first > last  # six layers and the embeddings against two and the head
    t = predict_time(shape, plan, global_batch=16, cluster=NODE)
    assert t.compute == pytest.approx(16 * first) and t.bubble == pytest.approx(last)


def test_stages_add_up_to_the_model_s_flops() -> None:
    shape = ModelShape(layers=8, hidden=512, heads=8, vocab=32000, seq_len=512, params=10**8)
    plan = ParallelPlan(pp=3, micro_batch=2, stage_layers=(2, 3, 3))
    seconds = sum(stage_seconds(shape, plan, s, NODE).compute for s in range(3))
    tokens = plan.micro_batch * shape.seq_len
    assert seconds == pytest.approx(flops_per_token(shape) * tokens / (NODE.tflops * 1e12))


def test_sharding_costs_more_traffic_than_replication() -> None:
    comm = [
        predict_time(SHAPE, ParallelPlan(dp=8, zero=z, micro_batch=4), 32, NODE).comm
        for z in (0, 3)
    ]
    assert comm[1] > comm[0]


def test_planner_keeps_tensor_parallel_inside_a_node() -> None:
    ranking = rank_plans(SHAPE, NODE, global_batch=32)
    assert all(c.plan.tp <= 4 for c in ranking.candidates)
    assert any("cross nodes" in why for _, why in ranking.rejected)
    assert all(c.memory.total <= NODE.memory_bytes for c in ranking.candidates)
    speeds = [c.tokens_per_s for c in ranking.candidates]
    assert speeds == sorted(speeds, reverse=True)


def test_model_that_fits_nowhere_says_what_it_needs() -> None:
    tiny = ClusterShape("t", "x", 1, 2, memory_gb=0.001, tflops=1, intra_gbps=1, inter_gbps=1)
    with pytest.raises(PlanError, match=r"fits nowhere on 2 x .* the leanest plan"):
        rank_plans(SHAPE, tiny, global_batch=32)


def test_shipped_clusters_load_with_node_override() -> None:
    h100 = load_cluster("dgx_h100", nodes=4)
    assert h100.devices == 32 and h100.memory_gb == 80
    for name in ("dgx_a100_80gb", "mi300x", "ascend_910b"):
        assert load_cluster(name).devices_per_node == 8


def test_plan_command_ranks_a_zoo_model(capsys: pytest.CaptureFixture[str]) -> None:
    from xirang_planner.command import main

    assert main(["model=gpt_125m", "cluster=dgx_h100", "nodes=2", "--json", "--top", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cluster"]["nodes"] == 2 and len(report["ranked"]) == 5
    first = report["ranked"][0]
    assert first["memory_bytes"]["total"] <= 80 * 2**30
    assert first["parallel"]["name"] in {"ddp", "fsdp", "tp", "sp", "pp", "hybrid", "single"}


def test_plan_command_rejects_unknown_settings() -> None:
    from xirang_planner.command import main

    from xirang_core.errors import ConfigError

    with pytest.raises(ConfigError, match="not a plan setting"):
        main(["model=gpt_tiny", "cluster=dgx_h100", "gpus=8"])
