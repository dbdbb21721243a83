"""A multi-process strategy with the default one worker: it runs on a process group of one (as
``torchrun --nproc-per-node=1`` would), or, where its split needs more workers, it is refused
before anything starts with a message that names ``trainer.nproc``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, QUICK, run_dirs

#: the strategy path is under test, not the model: the smallest one that trains
RUN = (*ONE_LAYER_GPT, *QUICK)

#: every native strategy whose degrees fit one worker
ONE_WORKER = ["ddp", "fsdp", "tp", "pp", "hybrid"]


@pytest.fixture(scope="module")
def single_loss(tmp_path_factory: pytest.TempPathFactory) -> float:
    """The final loss of the same run with parallel=single."""
    folder = tmp_path_factory.mktemp("single")
    done = subprocess.run(
        [sys.executable, "-m", "xirang", "parallel=single", *RUN],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(next(folder.rglob("summary.json")).read_text())["final_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ONE_WORKER)
def test_a_multi_process_strategy_trains_on_one_worker(
    run_xirang, tmp_path: Path, single_loss: float, strategy: str
) -> None:
    result = run_xirang(f"parallel={strategy}", *RUN)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    output = " ".join((result.stdout + result.stderr).split())
    assert f"parallel={strategy} runs on one worker (trainer.nproc=1)" in output
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["steps"] == 6
    assert summary["final_loss"] == pytest.approx(single_loss, rel=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["parallel=sp"], "parallel=sp cannot run on trainer.nproc=1 worker(s): sequence parallel"),
        (["parallel=tp", "parallel.tp=2"], "It runs with trainer.nproc=2"),
        (["parallel=hybrid", "parallel.pp=2"], "It runs with trainer.nproc=2 or 4"),
    ],
)
def test_a_split_that_needs_more_workers_names_trainer_nproc(
    run_xirang, tmp_path: Path, args: list[str], message: str
) -> None:
    result = run_xirang(*args, *QUICK)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert message in " ".join(result.stderr.split())
    assert not list(tmp_path.rglob("metrics.jsonl"))  # refused before a worker started
