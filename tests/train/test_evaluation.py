"""Evaluation while training: ``trainer.eval_batches`` held-out batches every
``trainer.eval_every`` steps, on the progress line, in metrics.jsonl and in loss_curve.png."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.axes
import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from tests.train.conftest import assembled
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.train import report
from xirang_core.train.loop import progress_line
from xirang_core.train.worker import held_out_loss

RUN = (*ONE_LAYER_GPT, "device=cpu", "trainer.max_steps=6", "trainer.sample_tokens=0")


@pytest.mark.parametrize("count", [3, 5])
def test_eval_batches_is_how_many_held_out_batches_are_scored(count: int, tmp_path: Path) -> None:
    with assembled([*RUN, f"trainer.eval_batches={count}"], tmp_path / "run") as parts:
        scored: list[int] = []
        read = parts.val.get
        parts.val.get = lambda index, micro=0: scored.append(index) or read(index, micro)  # type: ignore[method-assign]
        held_out_loss(parts)
    assert scored == list(range(count))


def test_eval_batches_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"trainer.eval_batches=0: must be at least 1"):
        compose([*RUN, "trainer.eval_batches=0"])


def test_the_progress_line_shows_the_eval_loss_when_the_step_evaluated() -> None:
    record = {"step": 3, "loss": 4.5, "tokens_per_s": 900.0}
    assert progress_line(record) == "step 3 loss 4.5000 tokens/s 900"
    assert progress_line({**record, "val_loss": 5.25}) == (
        "step 3 loss 4.5000 eval_loss 5.2500 tokens/s 900"
    )


def test_the_plot_draws_train_and_eval_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        {"step": 1, "loss": 5.0},
        {"step": 2, "loss": 4.0, "val_loss": 4.6},
        {"step": 4, "loss": 3.0, "val_loss": 4.2},
    ]
    drawn: dict[Any, list[tuple]] = {}
    plot = matplotlib.axes.Axes.plot

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        drawn[kwargs.get("label")] = list(zip(args[0], args[1], strict=True))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    report.plot_loss(records, tmp_path / report.PLOT_FILE, "loss")
    assert (tmp_path / report.PLOT_FILE).stat().st_size > 0
    assert drawn == {
        report.TRAIN_SERIES: [(1, 5.0), (2, 4.0), (4, 3.0)],
        report.EVAL_SERIES: [(2, 4.6), (4, 4.2)],
    }


@pytest.mark.slow
def test_a_run_prints_and_logs_its_eval_loss(run_xirang: Callable, tmp_path: Path) -> None:
    result = run_xirang(
        *RUN, "trainer.eval_every=2", "trainer.log_every=3", "trainer.eval_batches=2"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = run_dirs(tmp_path)[-1]
    records = report.read_metrics(run_dir)
    evaluated = {r["step"]: r["val_loss"] for r in records if "val_loss" in r}
    assert sorted(evaluated) == [2, 4, 6]  # every 2 steps and the last (the summary's)
    printed = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    for step, loss in evaluated.items():
        assert any(
            line.startswith(f"step {step} ") and f"eval_loss {loss:.4f}" in line for line in printed
        ), printed
    assert not any("eval_loss" in line for line in printed if line.startswith("step 3 "))
    # the progress bar keeps the latest evaluation in view (rich draws it on the way out)
    assert re.search(
        rf"loss \d\.\d{{3}} eval loss {evaluated[6]:.3f}", result.stdout + result.stderr
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["val_loss"] == evaluated[6]
    assert (summary["global_batch"], summary["micro_batch"], summary["grad_accum"]) == (4, 4, 1)
    assert (run_dir / report.PLOT_FILE).exists()
