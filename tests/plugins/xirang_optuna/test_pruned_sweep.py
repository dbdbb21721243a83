"""``hydra/sweeper=optuna_pruning``: an Optuna search over the embedded run's learning rate
whose pruner stops bad trials at an evaluation, against a plain ``-m`` grid of the same points."""

from __future__ import annotations

import csv
import json
import numbers
from pathlib import Path

import optuna
import pytest
import yaml
from xirang_optuna.trial import open_storage

from xirang_core.sweep.objective import OBJECTIVES

pytestmark = pytest.mark.slow

#: a run of a few seconds that is still a learning curve: evaluations every 5 of 30 steps
TINY = (
    "model=gpt_tiny",
    "tokenizer=bytes",
    "data.seq_len=32",
    "trainer.global_batch=4",
    "trainer.max_steps=30",
    "trainer.eval_every=5",
    "trainer.log_every=5",
    "trainer.sample_tokens=0",
    "optim.warmup_steps=2",
    "checkpoint=disabled",
)
TRIALS = 8


def sweep(run_xirang, runs: Path, *args: str) -> Path:
    done = run_xirang("-m", *args, *TINY, env={"XIRANG_RUNS": str(runs)}, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "sweep results (best first)" in done.stdout
    (folder,) = [p.parent for p in runs.rglob("sweep_results.csv")]
    return folder


def table(folder: Path) -> list[dict[str, str]]:
    with (folder / "sweep_results.csv").open() as f:
        return list(csv.DictReader(f))


def lr_of(row: dict[str, str]) -> str:
    (lr,) = [o.split("=", 1)[1] for o in row["overrides"].split() if o.startswith("optim.lr=")]
    return lr


def test_pruning_stops_bad_trials_and_keeps_the_best(run_xirang, tmp_path: Path) -> None:
    folder = sweep(
        run_xirang,
        tmp_path / "pruned",
        "hydra/sweeper=optuna_pruning",
        f"hydra.sweeper.n_trials={TRIALS}",
        "hydra.sweeper.sampler.seed=7",
        "optim.lr=tag(log, interval(1e-4, 1e-1))",
    )
    rows = table(folder)
    assert len(rows) == TRIALS
    stopped = [r for r in rows if r["pruned_at"]]
    assert len(stopped) >= 3, rows
    for row in stopped:  # each ended cleanly at the step its pruner stopped it
        run_dir = Path(row["run_dir"])
        summary = json.loads((run_dir / "summary.json").read_text())
        steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()]
        assert summary["pruned_at"] == summary["steps"] == steps[-1] == int(row["pruned_at"])
        assert summary["steps"] < 30 and summary["val_loss"] > 0
    assert not any(r["pruned_at"] for r in rows[: TRIALS - len(stopped)])  # finished rank first

    study = optuna.load_study(study_name="xirang", storage=open_storage(None, folder))
    states = [t.state.name for t in study.trials]
    assert states.count("PRUNED") == len(stopped) and states.count("COMPLETE") == len(rows) - len(
        stopped
    )
    assert all(t.intermediate_values for t in study.trials)  # every job reported to the study
    results = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    assert sorted(results["pruned_trials"]) == sorted(
        int(r["overrides"].split("sweep.trial=")[1].split()[0]) for r in stopped
    )

    finished = json.loads((Path(rows[0]["run_dir"]) / "summary.json").read_text())
    for key in OBJECTIVES:  # every objective a sweep may name is a figure of the summary
        assert isinstance(finished[key], numbers.Real), key

    # The plain grid trains in full only the points the pruner stopped, and the best trial's
    # point: a trial that finished is the very run a grid job of its point is (same seed and
    # steps), which the best one's grid job shows, so the other finished trials stand in for
    # their own grid jobs
    rerun = [rows[0], *stopped]
    grid = sweep(run_xirang, tmp_path / "grid", "optim.lr=" + ",".join(lr_of(r) for r in rerun))
    grid_rows = table(grid)
    assert sorted(lr_of(r) for r in grid_rows) == sorted(lr_of(r) for r in rerun)
    [best_again] = [r for r in grid_rows if lr_of(r) == lr_of(rows[0])]
    assert float(best_again["val_loss"]) == pytest.approx(float(rows[0]["val_loss"]), rel=1e-6)
    finished_in_full = grid_rows + [r for r in rows if not r["pruned_at"]]
    best_grid = min(float(r["val_loss"]) for r in finished_in_full)
    best_pruned = float(rows[0]["val_loss"])
    assert best_pruned <= 1.05 * best_grid, (best_pruned, best_grid)
    assert results["best_value"] == pytest.approx(best_pruned)


def test_a_plain_search_runs_the_grid_it_is_given(run_xirang, tmp_path: Path) -> None:
    """``hydra/sweeper=optuna`` without a pruner: every trial runs to the end, no trial number
    is passed to the jobs, and the grid sampler stops at the grid's size."""
    folder = sweep(
        run_xirang,
        tmp_path / "grid",
        "hydra/sweeper=optuna",
        "hydra/sweeper/sampler=grid",
        "hydra.sweeper.n_trials=10",
        "optim.lr=choice(0.001,0.01,0.1)",
    )
    rows = table(folder)
    assert sorted(lr_of(r) for r in rows) == ["0.001", "0.01", "0.1"]
    assert not any("sweep.trial" in r["overrides"] or r["pruned_at"] for r in rows)
    study = optuna.load_study(study_name="xirang", storage=open_storage(None, folder))
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    best = yaml.safe_load((folder / "optimization_results.yaml").read_text())["best_value"]
    assert best == pytest.approx(min(float(r["val_loss"]) for r in rows))
