"""``python -m xirang`` under a real torchrun adopts torchrun's world: one run directory, the
same losses as the local scheduler's ``trainer.nproc=2``, a disagreeing setting refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from xirang_core.errors import ConfigError
from xirang_core.train.worker import micro_batches

RUN = ("parallel=ddp", "trainer.max_steps=3", "trainer.log_every=1", "trainer.sample_tokens=0")


def torchrun(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc-per-node=2 -m xirang ARGS`` (torchrun's own module, with this
    interpreter) in ``folder``."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    return subprocess.run(
        [*command, "-m", "xirang", *args],
        cwd=folder,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def accelerate(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``accelerate launch --multi_gpu --num_processes=2 -m xirang ARGS``: Accelerate starts
    the processes through torchrun (on the CPU too), as its multi-GPU recipes do."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu"]
    return subprocess.run(
        [*command, "--num_processes=2", "--num_machines=1", "-m", "xirang", *args],
        cwd=folder,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if '"loss"' in line]


@pytest.mark.slow
def test_torchrun_and_accelerate_launch_match_the_local_scheduler(
    tmp_path: Path, run_xirang
) -> None:
    under = tmp_path / "torchrun"
    under.mkdir()
    done = torchrun(under, *RUN, *ONE_LAYER_GPT)
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = run_dirs(under)  # one run directory, chosen by rank 0
    launched = tmp_path / "accelerate"
    launched.mkdir()
    done = accelerate(launched, *RUN, *ONE_LAYER_GPT)
    assert done.returncode == 0, done.stderr[-3000:]
    [accelerate_dir] = run_dirs(launched)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["tokens"] > 0
    local = run_xirang("trainer.nproc=2", *RUN, *ONE_LAYER_GPT)
    assert local.returncode == 0, local.stderr[-3000:]
    [local_dir] = [d for d in run_dirs(tmp_path) if tmp_path / "outputs" in d.parents]
    assert losses(run_dir) == pytest.approx(losses(local_dir), rel=1e-5)
    assert losses(accelerate_dir) == pytest.approx(losses(local_dir), rel=1e-5)
    assert json.loads((accelerate_dir / "summary.json").read_text())["world_size"] == 2
    assert len(losses(run_dir)) == 3 and min(losses(run_dir)) > 0


def test_torchrun_refuses_a_different_worker_count(tmp_path: Path) -> None:
    done = torchrun(tmp_path, *RUN, "trainer.nproc=3")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert len(errors) == 1
    assert "trainer.nproc=3" in errors[0] and "trainer.nproc=2" in errors[0]
    assert not run_dirs(tmp_path)


def test_a_worker_without_a_micro_batch_is_refused() -> None:
    assert micro_batches(8, 2, 2) == 2
    with pytest.raises(ConfigError, match="no micro-batch per step"):
        micro_batches(8, 16, 1)
