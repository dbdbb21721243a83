"""Acceptance: TensorBoard, MLflow and W&B together on a 2-worker run that is killed once and
resumes from its checkpoint; each tool's own reader finds every logged step exactly once, in
one tracker run that the restart continued. Runs the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tracking.readers import (
    mlflow_runs,
    tensorboard_scalars,
    wandb_history,
    wandb_run_ids,
)
from xirang_core.checkpoint.events import read_events
from xirang_core.train.report import read_metrics

pytestmark = pytest.mark.slow

STEPS = 10
RUN = [
    "model=gpt_tiny",
    "tokenizer=bytes",
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "data.seq_len=32",
    "trainer.global_batch=4",
    f"trainer.max_steps={STEPS}",
    "trainer.log_every=1",
    "trainer.eval_every=5",
    "trainer.sample_tokens=0",
    "trainer.nproc=2",
    "parallel=ddp",
    "checkpoint.interval=4",
    "checkpoint.async_save=false",  # the step-4 save is committed before the kill
    "trainer.max_restarts=1",
    "+drill={kill:[[6,1]]}",  # rank 1 dies after step 6: the restart trains 5 and 6 again
    "tracker=[tensorboard,mlflow,wandb]",
]


def offline_env(home: Path) -> dict[str, str]:
    """No W&B credentials, so ``mode: auto`` stays offline whoever runs the tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB_MODE")}
    return {**env, "NETRC": str(home / "no-netrc"), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, xirang_home: Path) -> Path:
    run_dir = tmp_path_factory.mktemp("tracked") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "xirang", *RUN, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env=offline_env(xirang_home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "failed and is off" not in proc.stderr  # no tracker failed
    assert any(e["event"] == "restore" for e in read_events(run_dir)), "the run never resumed"
    return run_dir


def logged_loss(run_dir: Path) -> dict[int, float]:
    """metrics.jsonl's loss per step (a replayed step trains bitwise the same)."""
    return {r["step"]: r["loss"] for r in read_metrics(run_dir)}


def tracker_state(run_dir: Path, name: str) -> dict[str, Any]:
    return json.loads((run_dir / "trackers" / f"{name}.json").read_text())


def test_tensorboard_holds_each_step_once(run: Path) -> None:
    scalars = tensorboard_scalars(run / "tensorboard", "loss")
    assert [step for step, _ in scalars] == list(range(1, STEPS + 1))
    assert dict(scalars) == pytest.approx(logged_loss(run), abs=1e-4)
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one per start
    waits = tensorboard_scalars(run / "tensorboard", "data_wait_ms")
    assert len(waits) == STEPS and all(v >= 0 for _, v in waits)
    assert [s for s, _ in tensorboard_scalars(run / "tensorboard", "val_loss")] == [5]


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
    assert len(files) == 2  # the first start and the restart, both the same W&B run
    assert set().union(*(wandb_run_ids(f) for f in files)) == {run_id}
    rows = [row for f in files for row in wandb_history(f)]
    assert sorted(row["_step"] for row in rows) == list(range(1, STEPS + 1))
    loss = {row["_step"]: row["loss"] for row in rows}
    assert loss == pytest.approx(logged_loss(run), abs=1e-4)
