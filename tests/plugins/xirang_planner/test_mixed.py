"""The planner over a mixed cluster: stage boundaries from the time and memory models (the
best split of each pipeline, within each stage's memory), batch shares that make pipeline kinds
finish together, ``xirang plan`` for issue 37's cluster (8 H100 + 16 A100 + 16 Ascend 910B,
``llama3_70b``), and bad input refused in one line."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from xirang_planner.clusters import MixedCluster, load_cluster
from xirang_planner.memory import stage_memory
from xirang_planner.mixed import Builder, Options, layouts, plan_mixed
from xirang_planner.timing import stage_seconds

from xirang.planning import ModelShape, compose, model_shape, plan_problem
from xirang_core.plugins import get_registry

MIXED = "mixed_h100_a100_910b"


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xirang", "plan", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def llama_8b() -> ModelShape:
    shape = model_shape(compose(["model=llama3_8b"]), get_registry())
    assert shape is not None
    return replace(shape, seq_len=4096)


@pytest.fixture(scope="module")
def mixed_70b() -> dict[str, Any]:
    done = plan("model=llama3_70b", f"cluster={MIXED}", "global_batch=640", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_70b_split_puts_more_layers_on_faster_devices(mixed_70b: dict[str, Any]) -> None:
    memory = {g["device"]: g["memory_gb"] * 2**30 for g in mixed_70b["cluster"]["groups"]}
    [pipeline] = mixed_70b["plan"]["pipelines"]  # 70B fits no type alone but one pipeline
    stages = pipeline["stages"]
    assert {s["device"] for s in stages} == set(memory)  # every type has stages
    assert sum(s["layers"] for s in stages) == 80
    assert all(s["memory_bytes"] <= memory[s["device"]] for s in stages)
    per_type: dict[str, list[int]] = {}
    for s in stages:
        per_type.setdefault(s["device"], []).append(s["layers"])
    # an H100 stage (640 TFLOP/s sustained) takes about 3x an A100's or a 910B's layers
    assert min(per_type["H100-SXM5-80GB"]) > 2 * max(per_type["Ascend910B"])
    assert min(per_type["H100-SXM5-80GB"]) > 2 * max(per_type["A100-SXM4-80GB"])
    assert pipeline["rows"] == 640 and mixed_70b["plan"]["rows_per_type"] == dict.fromkeys(
        memory, 640
    )


def test_the_70b_split_beats_every_type_alone(mixed_70b: dict[str, Any]) -> None:
    alone = {a["device"]: a for a in mixed_70b["alone"]}
    assert alone["H100-SXM5-80GB"]["step_s"] is None  # 8 x 80 GB cannot hold 70B's states
    assert "does not fit" in alone["H100-SXM5-80GB"]["why"]
    best = min((a for a in alone.values() if a["step_s"]), key=lambda a: a["step_s"])
    speedup = mixed_70b["speedup_vs_best_single_type"]
    assert speedup == pytest.approx(best["step_s"] / mixed_70b["plan"]["step_s"], rel=1e-3)
    assert speedup > 1.5


def test_the_split_it_prints_is_accepted_by_the_pipeline_strategy(
    mixed_70b: dict[str, Any],
) -> None:
    settings = mixed_70b["plan"]["runs_as"].split()
    config = compose(["model=llama3_70b", *settings])
    [pipeline] = mixed_70b["plan"]["pipelines"]
    assert config["parallel"]["stage_layers"] == [s["layers"] for s in pipeline["stages"]]
    # and the strategy's plan for those workers passes the checks made before launch
    trainer, registry = config["trainer"], get_registry()
    strategy = registry.create("parallel", config["parallel"])
    split = strategy.plan(trainer["nproc"], trainer["micro_batch"])
    shape = model_shape(config, registry)
    assert shape is not None
    assert not plan_problem(split, shape, trainer["global_batch"])


def test_the_command_prints_stages_shares_and_speedup() -> None:
    done = plan("model=llama3_70b", f"cluster={MIXED}", "global_batch=640")
    assert done.returncode == 0, done.stderr[-2000:]
    for line in (
        "on mixed_h100_a100_910b: 8 H100-SXM5-80GB + 16 A100-SXM4-80GB + 16 Ascend910B",
        "mixed plan: step ",
        "  stage  device            devices  layers  GiB/dev  s/micro-batch",
        "batch share per device type",
        "runs as (ranks placed stage by stage): parallel=hybrid",
        "predicted speedup over the best single-type plan (",
    ):
        assert line in done.stdout, done.stdout


@pytest.mark.parametrize(("order", "dp", "tp"), [((0, 1), 1, 4), ((1, 2, 0), 1, 8), ((2, 0), 2, 2)])
def test_each_pipeline_takes_the_best_split_the_time_and_memory_models_allow(
    llama_8b: ModelShape, order: tuple[int, ...], dp: int, tp: int
) -> None:
    shape = replace(llama_8b, layers=10)  # few enough layers to try every split
    cluster = tight_cluster()
    options = Options(tp, 1, "none")
    pipeline = Builder(shape, cluster).build(order, dp, options)
    assert pipeline is not None
    devices = pipeline.devices(cluster)

    def slowest(split: tuple[int, ...]) -> float | None:
        trial = options.plan(dp, len(split), split)
        batch = dp * (len(split) + 1)  # more micro-batches than stages: the most in flight
        for s, device in enumerate(devices):
            if stage_memory(shape, trial, batch, "adamw", s).total > device.memory_bytes:
                return None
        return max(stage_seconds(shape, trial, s, d).total for s, d in enumerate(devices))

    splits = [
        tuple(b - a for a, b in itertools.pairwise((0, *cuts, shape.layers)))
        for cuts in itertools.combinations(range(1, shape.layers), len(devices) - 1)
    ]
    fitting = [t for t in map(slowest, splits) if t is not None]
    found = slowest(pipeline.plan.stage_layers)
    assert found is not None and math.isclose(found, min(fitting), rel_tol=1e-9)


def tight_cluster() -> MixedCluster:
    """Issue 37's types with the H100 memory cut to 24 GB: the fastest device holds the
    fewest layers, so the split is bound by memory, not speed."""
    cluster = load_cluster(MIXED)
    assert isinstance(cluster, MixedCluster)
    h100, *rest = cluster.groups
    return replace(cluster, groups=(replace(h100, memory_gb=24), *rest))


def test_memory_binds_the_fastest_device(llama_8b: ModelShape) -> None:
    options = Options(8, 1, "none")
    roomy = load_cluster(MIXED)
    assert isinstance(roomy, MixedCluster)
    wide = Builder(llama_8b, roomy).build((0, 1), 1, options)
    tight = Builder(llama_8b, tight_cluster()).build((0, 1), 1, options)
    assert wide is not None and tight is not None
    h100 = tight_cluster().groups[0]
    assert tight.memory[0] <= h100.memory_bytes < wide.memory[0]
    assert tight.plan.stage_layers[0] < wide.plan.stage_layers[0]


def test_pipeline_kinds_share_the_batch_to_finish_together(llama_8b: ModelShape) -> None:
    cluster = load_cluster(MIXED)
    assert isinstance(cluster, MixedCluster)
    search = plan_mixed(llama_8b, cluster, 512)
    assert search.best is not None and search.runnable is not None
    several = [p for p in (search.best,) if len(p.shares) > 1]
    assert several, "an 8B model fits each type alone: kinds over types should win"
    for mixed in several:
        assert sum(s.rows for s in mixed.shares) == 512
        times = [s.time.total for s in mixed.shares]
        # one more micro-batch per replica on the fastest kind would not finish sooner
        slack = max(s.time.total / s.micro_batches for s in mixed.shares)
        assert max(times) - min(times) <= slack
    assert all(p.step >= search.best.step for p in search.alone.values())


def test_every_grouping_of_the_types_into_pipeline_kinds_is_tried() -> None:
    found = list(layouts(3))
    # 3 alone, 3 pairs (together or apart), and the 5 groupings of all three
    assert len(found) == len(set(found)) == 3 + 3 * 2 + 5
    for layout in found:
        used = [g for kind in layout for g in kind]
        assert len(used) == len(set(used))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("tp=16",), "tensor parallelism across device types cannot run"),
        (("seq=1048576", "global_batch=64"), "no pipeline stage fits any device"),
        (("devices=8",), "a mixed cluster is planned over all its devices"),
    ],
    ids=["tp across types", "a stage fits no device", "devices on a mixed cluster"],
)
def test_bad_input_is_one_error_naming_what_is_valid(args: tuple[str, ...], says: str) -> None:
    done = plan("model=llama3_70b", f"cluster={MIXED}", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert says in error


@pytest.mark.parametrize(
    ("cluster", "says"),
    [
        ("dgx_h100:x", "is not option:nodes"),
        ("dgx_h100:1+dgx_h100:2", "groups of different device types"),
        ("dgx_h100:1+no_such:1", "no such cluster"),
    ],
)
def test_a_mixed_cluster_that_cannot_be_read_is_refused(cluster: str, says: str) -> None:
    done = plan("model=llama3_8b", f"cluster={cluster}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert says in error
