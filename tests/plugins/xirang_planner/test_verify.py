"""``xirang plan --verify``: a plan wrapped for real at its world size on torch's fake process
group, one step under fake tensors, measured beside the planner's figures; a plan whose
measured peak does not fit the device is never recommended."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from xirang_planner.clusters import load_cluster
from xirang_planner.memory import predict_memory
from xirang_planner.planner import rank_plans
from xirang_planner.verify import predicted_bytes, run_config, verify

from xirang.planning import ClusterShape, ParallelPlan, measure_plan, model_shape, unmeasured
from xirang_core.config import compose
from xirang_core.plugins import get_registry

#: the planner's goal against the measurement
GOAL = 0.05
#: a Llama small enough for seconds per plan, its shape still a Llama's (GQA, SwiGLU)
MODEL = ["model=llama_tiny", "model.vocab_size=4096", "data.seq_len=128"]


@pytest.fixture(scope="module")
def tiny() -> tuple[dict[str, Any], Any]:
    registry = get_registry()
    config = compose(MODEL, registry)
    return config, model_shape(config, registry)


def test_a_plan_is_wrapped_for_real_at_its_world_size(tiny: Any) -> None:
    """16 ranks of FSDP2 (zero 3): this rank holds a sixteenth of the parameters in fp32 and
    Adam's two moments of it; every layer is gathered in forward and backward and its
    gradients reduce-scattered, each collective on the mesh's ``dp`` dimension."""
    config, shape = tiny
    plan = ParallelPlan(16, 1, 1, False, 3, 1, "none")
    measured = measure_plan(run_config(config, shape, 32, 2), plan)
    assert measured.params == pytest.approx(shape.params * 4 / 16, rel=0.001)
    assert measured.optimizer == 2 * measured.params
    kinds = {(c["kind"], c["dim"]) for c in measured.collectives}
    assert {("all_gather", "dp"), ("reduce_scatter", "dp")} <= kinds
    assert measured.peak > measured.params + measured.grads + measured.optimizer


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(ParallelPlan(16, 1, 1, False, 3, 1, "none"), id="dp16-zero3"),
        # about a minute on a loaded 2-core host: tensor parallel's DTensor dispatch
        pytest.param(
            ParallelPlan(4, 2, 1, True, 3, 1, "full"), id="dp4-tp2-sp", marks=pytest.mark.slow
        ),
    ],
)
def test_measured_traffic_agrees_with_the_planner(tiny: Any, plan: ParallelPlan) -> None:
    """The real FSDP2 (zero 3) and tensor/sequence-parallel wrapping of 16 and 8 ranks holds
    this rank's shards (parameters, Adam's two moments) as the planner counts them (the
    Llama's embeddings and head split by tensor parallel too), and each mesh dimension's bytes
    per step are within 5% of the planner's: parameters gathered in bf16, gradients reduced
    in fp32, the head gathered once per micro-batch."""
    config, shape = tiny
    global_batch = 32
    measured = measure_plan(run_config(config, shape, global_batch, 2), plan)
    predicted = predict_memory(shape, plan, global_batch, compute_bytes=2)
    assert measured.params == pytest.approx(predicted.params, rel=0.01)
    assert measured.optimizer == pytest.approx(predicted.optimizer, rel=0.01)
    moved = {d: n for d, n in measured.bytes_per_dim().items() if n > 2**10}  # not the loss's
    expected = predicted_bytes(shape, plan, global_batch, 2)
    assert set(expected) == set(moved)
    for dim, nbytes in expected.items():
        assert nbytes == pytest.approx(moved[dim], rel=GOAL), dim


def test_a_plan_whose_measured_peak_does_not_fit_is_not_recommended(tiny: Any) -> None:
    """With the device's memory just under the measured peak of the planner's first choice,
    the verification drops it from the ranking: the plans left to recommend are the next
    ones, each measured to fit."""
    config, shape = tiny
    described = load_cluster("dgx_h100")
    assert isinstance(described, ClusterShape)
    cluster = replace(described, memory_gb=64)
    ranking = rank_plans(shape, cluster, 16, 8)
    ranking.candidates = [c for c in ranking.candidates if not unmeasured(c.plan)]
    ranking.candidates = [c for c in ranking.candidates if c.plan.tp == 1]  # trusted peaks
    first = ranking.best.plan
    peak = measure_plan(run_config(config, shape, 16, 2), first).peak
    rows = verify(config, shape, ranking, 16, peak - 1, cluster.dtype_bytes)
    assert rows[0]["plan"] == first.label() and not rows[0]["fits"]
    left = [c.plan.label() for c in ranking.candidates]
    dropped = [r["plan"] for r in rows if not r["fits"]]
    assert not set(dropped) & set(left)
    kept = [r for r in rows if r["fits"]]
    assert len(kept) == 2 and all(r["measured"]["peak"] < peak for r in kept)
    assert ranking.best.plan.label() == kept[0]["plan"]
