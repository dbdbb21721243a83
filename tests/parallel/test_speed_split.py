"""``parallel.stage_layers=auto``: each pipeline stage's layers from its device's measured speed
and memory. The split itself (:func:`speed_split`), the config's refusals, and a two-stage run
with one stage under a CPU quota that takes the uneven split and trains as one process does."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.parallel.test_stage_layers import pp_config
from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import PlanError, speed_split, stage_bounds

speeds = st.lists(st.floats(0.05, 20.0), min_size=1, max_size=6)


def slowest(counts: tuple[int, ...], rates: list[float]) -> float:
    return max(c / v for c, v in zip(counts, rates, strict=True))


@given(speeds, st.integers(1, 40))
def test_every_layer_is_in_one_stage_and_the_slowest_is_as_fast_as_any_split(
    rates: list[float], layers: int
) -> None:
    if len(rates) > layers:
        with pytest.raises(PlanError, match="need at least"):
            speed_split(rates, layers)
        return
    counts = speed_split(rates, layers)
    # contiguous stages first to last, each at least one layer: counts that cover every layer
    assert len(counts) == len(rates) and min(counts) >= 1 and sum(counts) == layers
    if layers <= 12 and len(rates) <= 4:  # against every split of small cases
        splits = [
            c
            for c in itertools.product(range(1, layers + 1), repeat=len(rates))
            if sum(c) == layers
        ]
        best = min(slowest(c, rates) for c in splits)
        assert slowest(counts, rates) <= best * (1 + 1e-9)


@given(st.integers(1, 8), st.integers(1, 64), st.floats(0.1, 10.0))
def test_equal_speeds_give_the_even_split(stages: int, layers: int, speed: float) -> None:
    if stages > layers:
        return
    even = tuple(hi - lo for lo, hi in (stage_bounds(layers, s, stages) for s in range(stages)))
    assert speed_split([speed] * stages, layers) == even


@given(speeds, st.integers(1, 40))
def test_a_faster_device_never_gets_fewer_layers(rates: list[float], layers: int) -> None:
    if len(rates) > layers:
        return
    counts = speed_split(rates, layers)
    for a, b in itertools.permutations(range(len(rates)), 2):
        if rates[a] > rates[b]:
            assert counts[a] >= counts[b], (rates, counts)


def test_memory_caps_a_stage_and_the_rest_take_its_layers() -> None:
    # the faster device holds only 2 layers: the slower one takes the other 6
    assert speed_split([2.5, 1.0], 8) == (6, 2)
    assert speed_split([2.5, 1.0], 8, [2, 8]) == (2, 6)


def test_a_split_that_cannot_fit_names_what_would() -> None:
    with pytest.raises(PlanError) as error:
        speed_split([1.0, 1.0], 8, [3, 4])
    assert "cannot hold the model's 8 layers" in str(error.value)
    assert "most layers each: [3, 4]" in str(error.value)
    with pytest.raises(PlanError, match="stage 1 cannot hold one layer"):
        speed_split([1.0, 1.0], 8, [8, 0])


def test_auto_is_taken_at_compose_and_refused_where_it_cannot_run() -> None:
    assert pp_config("parallel.stage_layers=auto")["parallel"]["stage_layers"] == "auto"
    with pytest.raises(ConfigError, match="needs a pipeline"):
        pp_config("parallel.stage_layers=auto", "parallel.pp=1", "parallel.dp=2")
    with pytest.raises(ConfigError, match="give auto"):
        pp_config("parallel.stage_layers=fast")
    with pytest.raises(ConfigError, match="4 pipeline stages need at least 4 layers"):
        pp_config("parallel.stage_layers=auto", "trainer.nproc=4", "model.n_layer=2")


@pytest.mark.slow
def test_a_stage_under_a_cpu_quota_gets_fewer_layers_and_trains_as_one_process(
    run_xirang: Any, tmp_path: Path
) -> None:
    """``trainer.nproc=2 parallel=pp parallel.stage_layers=auto`` with stage 1 under a
    0.2-core quota: the split gives stage 0 more of the 4 layers, is recorded in the metrics
    and the summary with each stage's busy and idle time, and the losses are the
    single-process run's on the same global batches (fp32)."""
    from xirang_local.quota import CPU_CGROUP

    assert os.access(CPU_CGROUP, os.W_OK), f"needs the cgroup v1 CPU controller at {CPU_CGROUP}"
    common = (
        "model=gpt_tiny",
        "tokenizer=bytes",
        "model.n_layer=4",
        "model.n_embd=128",
        "model.n_head=4",
        "data.seq_len=128",
        "trainer.global_batch=8",
        "trainer.micro_batch=2",
        "trainer.max_steps=4",
        "trainer.log_every=1",
        "trainer.sample_tokens=0",
        "trainer.threads=1",
    )
    pipeline, single = tmp_path / "pp", tmp_path / "single"
    runs = {
        pipeline: [
            "trainer.nproc=2",
            "parallel=pp",
            "parallel.stage_layers=auto",
            "scheduler.worker_quota=[1.0,0.2]",
        ],
        single: [],
    }
    errors = {}
    for run_dir, args in runs.items():
        done = run_xirang(*common, *args, f"hydra.run.dir={run_dir}")
        assert done.returncode == 0, done.stderr[-3000:]
        errors[run_dir] = done.stderr
    logged = [json.loads(line) for line in (pipeline / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (single / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in logged] == pytest.approx([r["loss"] for r in reference], abs=1e-5)
    layers = logged[-1]["pipeline_stage_layers"]
    assert layers[0] > layers[1] and sum(layers) == 4, errors[pipeline][-2000:]
    summary = json.loads((pipeline / "summary.json").read_text())["pipeline"]
    assert summary["stage_layers"] == layers
    assert all(b > 0 for b in summary["busy_ms"]) and 0 < summary["bubble"] < 1
