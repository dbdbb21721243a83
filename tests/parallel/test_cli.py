"""From the command line: a plan that cannot work stops before any worker starts; auto runs."""

from __future__ import annotations

import json

import pytest

from tests.parallel.conftest import TINY_LLAMA


def test_impossible_plan_refused_before_launch(run_xirang) -> None:
    result = run_xirang("trainer.nproc=3", "trainer.global_batch=12", "parallel=tp")
    assert result.returncode != 0
    assert "tp=3 does not divide the 4 heads" in result.stderr
    assert "Nearest valid plans" in result.stderr
    assert "worker rank" not in result.stderr  # refused in the launcher, not by a worker


@pytest.mark.slow
def test_parallel_auto_trains_with_the_chosen_plan(run_xirang, tmp_path) -> None:
    result = run_xirang(
        "parallel=auto",
        "trainer.nproc=2",
        "trainer.max_steps=2",
        "trainer.sample_tokens=0",
        "model=gpt_tiny",
        "tokenizer=bytes",
        "model.n_layer=2",
        "model.n_embd=32",
        "model.n_head=2",
        "data.seq_len=32",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "parallel=auto chose" in result.stderr + result.stdout
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["steps"] == 2 and summary["world_size"] == 2


@pytest.mark.slow
def test_parallel_auto_measures_its_runtime_on_4_workers_whose_heads_split_only_2_ways(
    run_xirang, tmp_path, xirang_home
) -> None:
    """The README's ``trainer.nproc=4 parallel=auto`` on a Llama whose 2 key/value heads do not
    split over 4 workers: the runtime probe measures tensor parallel over 2 beside a pipeline
    (dp2xtp2 without sharding, which no strategy runs, used to kill the run) and trains."""
    for cached in xirang_home.glob("calibration/runtime-*-4w-*llama*"):
        cached.unlink()  # measured by this run, not read from an earlier one
    result = run_xirang(
        "parallel=auto",
        "trainer.nproc=4",
        "trainer.max_steps=2",
        "trainer.sample_tokens=0",
        *(o for o in TINY_LLAMA if not o.startswith("trainer.max_steps=")),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "parallel=auto chose" in result.stderr + result.stdout
    assert list(xirang_home.glob("calibration/runtime-*-4w-*llama*"))  # the probe ran
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["steps"] == 2 and summary["world_size"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["sp", "pp"])
def test_split_runs_evaluate_and_report(run_xirang, tmp_path, strategy: str) -> None:
    """End to end through the launcher: every worker evaluates together (the split model's
    forward is collective), and the summary is written with the whole model's parameters (a
    pipeline stage holds only half the layers)."""
    result = run_xirang(
        f"parallel={strategy}", "trainer.nproc=2", "trainer.max_steps=2", "trainer.sample_tokens=4"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(next(tmp_path.rglob("summary.json")).read_text())
    assert summary["val_loss"] > 0 and summary["sample"] == ""
    assert summary["params"] == whole_model_params()


def whole_model_params() -> int:
    """Parameters of the default model, unsplit, as the summary counts them."""
    from xirang_core.config import compose as compose_config
    from xirang_core.plugins import get_registry

    model = compose_config([])["model"]
    settings = {k: v for k, v in model.items() if k not in ("family", "name")}
    return get_registry().load("model", model["family"]).from_config(settings).num_params()
