"""Acceptance: TensorBoard, MLflow and W&B together on a 2-worker run, started again in its run
directory: the second start resumes from the step-4 checkpoint and trains steps 5 and 6 again.
Each tool's own reader finds every logged step exactly once, in the one tracker run that the
resumed run continued. Runs the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ONE_LAYER_GPT
from tests.tracking.readers import (
    mlflow_runs,
    tensorboard_scalars,
    wandb_history,
    wandb_run_ids,
)
from xirang_core.checkpoint.events import read_events
from xirang_core.train.report import read_metrics

pytestmark = pytest.mark.slow

STEPS, FIRST = 10, 6  # the first start trains 6 steps, the resumed one on to 10
RUN = [
    *ONE_LAYER_GPT,
    "trainer.log_every=1",
    "trainer.eval_every=5",
    "trainer.sample_tokens=0",
    "trainer.nproc=2",
    "parallel=ddp",
    "checkpoint.interval=4",
    "checkpoint.final=false",  # the first start's last checkpoint is step 4's
    "checkpoint.async_save=false",  # committed within its step: the next record has its times
    "tracker=[tensorboard,mlflow,wandb]",
]


def offline_env(home: Path) -> dict[str, str]:
    """No W&B credentials, so ``mode: auto`` stays offline whoever runs the tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    return {**env, "NETRC": str(home / "no-netrc"), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, xirang_home: Path) -> Path:
    run_dir = tmp_path_factory.mktemp("tracked") / "run"
    for steps in (FIRST, STEPS):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "xirang",
                *RUN,
                f"trainer.max_steps={steps}",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=run_dir.parent,
            env=offline_env(xirang_home),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "failed and is off" not in proc.stderr  # no tracker failed
    restored = [e["step"] for e in read_events(run_dir) if e["event"] == "restore"]
    assert restored == [4], "the second start did not resume from step 4"
    return run_dir


def logged_loss(run_dir: Path) -> dict[int, float]:
    """metrics.jsonl's loss per step, as first logged: the tracker keeps the first of a step
    trained twice (the resumed run's schedule spans 10 steps, so steps 5 and 6 differ)."""
    loss: dict[int, float] = {}
    for record in read_metrics(run_dir):
        loss.setdefault(record["step"], record["loss"])
    return loss


def tracker_state(run_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((run_dir / "trackers" / f"{name}.json").read_text())


def test_tensorboard_holds_each_step_once(run: Path) -> None:
    scalars = tensorboard_scalars(run / "tensorboard", "loss")
    assert [step for step, _ in scalars] == list(range(1, STEPS + 1))
    assert dict(scalars) == pytest.approx(logged_loss(run), abs=1e-4)
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one per start
    waits = tensorboard_scalars(run / "tensorboard", "data_wait_ms")
    assert len(waits) == STEPS and all(v >= 0 for _, v in waits)
    # step 5's periodic evaluation, the first start's final one (step 6), the last step's
    evaluated = [s for s, _ in tensorboard_scalars(run / "tensorboard", "val_loss")]
    assert evaluated == [5, FIRST, STEPS]


def test_mlflow_continues_one_run(run: Path, xirang_home: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{xirang_home / 'mlflow' / 'mlflow.db'}"
    runs = mlflow_runs(uri, run)
    assert [r.info.run_id for r in runs] == [tracker_state(run, "mlflow")["run_id"]]
    found = runs[0]
    assert found.info.status == "FINISHED"
    assert found.data.params["trainer.nproc"] == "2"
    assert found.data.params["tracker.mlflow.name"] == "mlflow"
    client = MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(found.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, STEPS + 1))
    assert {m.step: m.value for m in history} == pytest.approx(logged_loss(run), abs=1e-4)
    assert {"grad_norm", "lr", "tokens_per_s", "mem_bytes", "ckpt_save_s"} <= set(
        found.data.metrics
    )
    artifacts = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert {"summary.json", "loss_curve.png", "config.yaml"} <= artifacts


def test_wandb_offline_run_continues_one_id(run: Path) -> None:
    run_id = tracker_state(run, "wandb")["run_id"]
    files = sorted((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 2  # the first start and the resumed one, both the same W&B run
    assert set().union(*(wandb_run_ids(f) for f in files)) == {run_id}
    rows = [row for f in files for row in wandb_history(f)]
    assert sorted(row["_step"] for row in rows) == list(range(1, STEPS + 1))
    loss = {row["_step"]: row["loss"] for row in rows}
    assert loss == pytest.approx(logged_loss(run), abs=1e-4)
