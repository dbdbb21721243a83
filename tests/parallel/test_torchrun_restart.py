"""torchrun's elastic restarts resume the run: under a real ``torchrun --max-restarts=1`` with
one rank killed mid-run (the drill's ``kill``), the restarted group continues the same run
directory (it follows torchrun's run id) from its last checkpoint and completes; a rank's death
marks the run failed only once torchrun has no restart left, and the hint it leaves repeats
the torchrun command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, Prepared, run_dirs

RUN = (
    "parallel=ddp",
    *ONE_LAYER_GPT,
    "trainer.max_steps=5",
    "trainer.sample_tokens=0",
    "trainer.eval_batches=1",
    "checkpoint.interval=2",
    "checkpoint.async_save=false",
    "+drill.kill=[[3,1]]",  # rank 1 is SIGKILLed at the end of step 3, once per run
)


def torchrun(folder: Path, home: Path, restarts: int) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node=2 --max-restarts=N -m xirang RUN`` in
    ``folder``, as a user types it (the ``torchrun`` script of this environment)."""
    launcher = ["torchrun", "--standalone", "--nproc_per_node=2", f"--max-restarts={restarts}"]
    return subprocess.run(
        [*launcher, "-m", "xirang", *RUN],
        cwd=folder,
        env={**os.environ, "XIRANG_HOME": str(home), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture
def home(tmp_path: Path, prepared_home: Prepared) -> Path:
    prepared_home.seed(tmp_path / "home")
    return tmp_path / "home"


@pytest.mark.slow
def test_a_killed_rank_restarts_into_the_same_run_and_completes(tmp_path: Path, home: Path) -> None:
    done = torchrun(tmp_path, home, restarts=1)
    assert done.returncode == 0, done.stderr[-4000:]
    [run_dir] = run_dirs(tmp_path / "outputs")  # the restart did not start another run
    assert "resumed from checkpoint step 2" in done.stdout + done.stderr
    assert not (run_dir / "resume.json").exists()  # completed: nothing left to resume
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 5


@pytest.mark.slow
def test_the_resume_hint_repeats_the_torchrun_command(tmp_path: Path, home: Path) -> None:
    """With no restart left the group stops; what resumes the run is the torchrun command it
    was started with (a ``python -m xirang`` would start a one-worker run instead)."""
    done = torchrun(tmp_path, home, restarts=0)
    assert done.returncode != 0
    [run_dir] = run_dirs(tmp_path / "outputs")
    state = json.loads((run_dir / "resume.json").read_text())
    typed = "torchrun --standalone --nproc_per_node=2 --max-restarts=0 -m xirang parallel=ddp"
    assert typed in state["command"] and typed in state["how"]
