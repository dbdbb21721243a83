"""``sweep.objective``: the summary figure a run returns to Hydra's sweeper; a name the summary
does not have stops the run before it starts, with the valid names."""

from __future__ import annotations

import math

from xirang_core.sweep.objective import OBJECTIVES, objective_value


def test_an_unknown_objective_is_one_clear_line_before_training(run_xirang, tmp_path) -> None:
    done = run_xirang("sweep.objective=best_loss", "trainer.max_steps=1", timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("xirang error: sweep.objective='best_loss'")
    assert all(name in lines[0] for name in OBJECTIVES)
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("metrics.jsonl"))  # nothing trained


def test_the_objective_is_the_named_figure_and_nan_when_unmeasured() -> None:
    summary = {"val_loss": 2.5, "tokens_per_cost": None}
    assert objective_value(summary, {"objective": "val_loss"}) == 2.5
    assert math.isnan(objective_value(summary, {"objective": "tokens_per_cost"}))  # a failed trial
