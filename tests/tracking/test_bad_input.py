"""Bad tracker and profiler settings: one clear line before anything starts; a tracking server
that cannot be reached: one warning, and the run, its files and its profile are complete."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from xirang_core.config import compose
from xirang_core.errors import ConfigError

SMALL = (
    *ONE_LAYER_GPT,
    "trainer.max_steps=4",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
)


def test_unknown_tracker_is_one_line_naming_the_valid_ones(run_xirang) -> None:
    result = run_xirang("tracker=[tensorboard,nope]", *SMALL)
    assert result.returncode != 0
    [line] = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert line.startswith("xirang error: tracker=nope: no such option")
    assert "mlflow, tensorboard, wandb" in line


@pytest.mark.parametrize("steps", ["[0,2]", "[3,9]", "[3,2]", "[2]"])
def test_profile_steps_outside_the_run(steps: str) -> None:
    with pytest.raises(ConfigError, match=r"trainer.profile.steps=.*trainer.max_steps=4"):
        compose([*SMALL, f"trainer.profile.steps={steps}"])


def test_credentials_in_the_tracking_uri_are_refused_and_never_echoed() -> None:
    uri = "tracker.mlflow.tracking_uri=https://alice:s3cret@mlflow.example:5000"
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_PASSWORD") as refused:
        compose([*SMALL, "tracker=[mlflow]", uri])
    assert "s3cret" not in str(refused.value) and "alice" not in str(refused.value)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_unreachable_server_warns_once_and_profile_is_written(run_xirang, tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{closed_port()}"
    result = run_xirang(
        *SMALL,
        "tracker=[mlflow]",
        f"tracker.mlflow.tracking_uri={uri}",
        "trainer.profile.steps=[2,3]",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "tracker mlflow failed" in line]
    assert len(warnings) == 1 and "training goes on" in warnings[0]
    [run] = run_dirs(tmp_path)
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").open())] == [1, 2, 3, 4]
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    [trace] = (run / "profile").glob("rank0.*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]  # Chrome trace: Perfetto, TensorBoard
    names = {e.get("name", "") for e in events if e.get("ph") == "X"}
    assert "aten::mm" in names or "aten::addmm" in names
    assert "ProfilerStep#2" in names and "ProfilerStep#3" in names
    assert "top operators by time" in result.stdout and "Self CPU" in result.stdout
