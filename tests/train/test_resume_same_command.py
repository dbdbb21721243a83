"""Ctrl-C checkpoints and says how to resume; the same command resumes that run, in its own
directory, and the summary then describes the whole run across both segments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_dirs
from xirang_core.checkpoint.events import record_event
from xirang_core.train.resume import MARKER, config_key, newest_interrupted, run_dir_for

#: a small, quick run: Ctrl-C comes after its first logged step. Long enough that the stop
#: always lands mid-run: with 8 steps an idle machine could finish the run between the test's
#: polls, and the output would then end with the summary instead of how to resume
STEPS = 24
ARGS = (
    f"trainer.max_steps={STEPS}",
    "trainer.log_every=1",
    "trainer.global_batch=4",
    "data.seq_len=64",
    "trainer.sample_tokens=0",
)


def _start(args: tuple[str, ...], cwd: Path) -> subprocess.Popen[str]:
    """The command as a terminal runs it: its own process group, which Ctrl-C signals whole."""
    return subprocess.Popen(
        [sys.executable, "-m", "xirang", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _ctrl_c_after_first_step(proc: subprocess.Popen[str], cwd: Path) -> str:
    try:
        deadline = time.monotonic() + 600
        while not list(cwd.glob("outputs/*/*/metrics.jsonl")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        return proc.communicate(timeout=600)[0]
    finally:
        proc.kill()


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ctrl_c_then_the_same_command_resumes_and_summarises_the_whole_run(tmp_path) -> None:
    output = _ctrl_c_after_first_step(_start(ARGS, tmp_path), tmp_path)
    lines = [line for line in output.splitlines() if line.startswith("xirang")]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    command = f"cd {tmp_path} && python -m xirang {' '.join(ARGS)}"
    assert lines[-1].startswith("xirang: stopped at step ") and lines[-1].endswith(command)
    [run_dir] = run_dirs(tmp_path)
    marker = json.loads((run_dir / MARKER).read_text())
    assert marker["state"] == "interrupted" and command in marker["how"]
    stopped_at = marker["step"]

    resumed = subprocess.run(
        ["bash", "-c", lines[-1].split("Resume with: ", 1)[1].replace("python", sys.executable)],
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_dirs(tmp_path) == [run_dir]  # the same run went on, in its directory
    assert not (run_dir / MARKER).exists()
    records = _records(run_dir)
    first = [r for r in records if r["segment"] == 1]
    second = [r for r in records if r["segment"] == 2]
    assert second[0]["step"] == stopped_at + 1 and second[-1]["step"] == STEPS
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["restarts"] == 1 and summary["steps"] == STEPS
    assert summary["first_loss"] == first[0]["loss"]  # the loss drop is the whole run's
    # the wall time and so tokens/s and MFU span both segments, not the last one alone
    assert summary["wall_time_s"] >= first[-1]["elapsed_s"] + second[-1]["elapsed_s"]
    computed = records[-1]["tokens"]  # the stop saved its own step: nothing was recomputed
    assert summary["tokens_per_s"] <= computed / summary["wall_time_s"] * 1.001
    assert 0 < summary["mfu"] < 1


def _interrupted_run(root: Path, name: str, key: str, state: str = "interrupted", **kw) -> Path:
    run_dir = root / "2026-01-01" / name
    run_dir.mkdir(parents=True)
    (run_dir / MARKER).write_text(
        json.dumps({"state": state, "config_key": key, "updated": kw.pop("updated", 1.0), **kw})
    )
    record_event(run_dir, "save", step=5)
    return run_dir


def test_only_an_interrupted_run_of_the_same_config_is_resumed(tmp_path) -> None:
    import socket

    host = socket.gethostname()
    older = _interrupted_run(tmp_path, "a", "k1", updated=1.0)
    newer = _interrupted_run(tmp_path, "b", "k1", updated=2.0)
    _interrupted_run(tmp_path, "c", "k2", updated=3.0)  # another config
    _interrupted_run(tmp_path, "d", "k1", "failed", updated=4.0)  # an error, not a stop
    _interrupted_run(tmp_path, "e", "k1", "running", updated=5.0, pid=os.getpid(), host=host)
    fresh = tmp_path / "2026-01-02" / "f"
    assert newest_interrupted(tmp_path, "k1", exclude=fresh) == newer
    (newer / MARKER).unlink()  # completed
    assert newest_interrupted(tmp_path, "k1", exclude=fresh) == older
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], text=True, capture_output=True
    ).stdout.strip()
    killed = _interrupted_run(tmp_path, "g", "k1", "running", updated=6.0, pid=int(gone), host=host)
    assert newest_interrupted(tmp_path, "k1", exclude=fresh) == killed  # its process is gone


def test_resume_never_and_sweeps_start_fresh(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XIRANG_RUNS", str(tmp_path))
    fresh = tmp_path / "2026-01-02" / "f"
    (fresh / ".hydra").mkdir(parents=True)
    auto = {"checkpoint": {"resume": "auto"}, "seed": 1}
    never = {"checkpoint": {"resume": "never"}, "seed": 1}
    interrupted = _interrupted_run(tmp_path, "a", config_key(auto))
    assert config_key(never) == config_key(auto)
    assert run_dir_for(never, fresh) == fresh
    assert run_dir_for(auto, fresh, sweeping=True) == fresh
    assert run_dir_for(auto, fresh) == interrupted
    assert not fresh.exists()  # Hydra's empty new directory does not linger


def test_torchruns_default_run_id_takes_up_only_a_run_of_the_same_config(
    tmp_path, monkeypatch
) -> None:
    """torchrun without a rendezvous (``srun torchrun --nproc-per-node=2``, the Slurm recipe)
    names every run ``none``: a restart continues its run, but another command started the
    same way starts its own rather than writing its config over a failed run's directory."""
    monkeypatch.setenv("XIRANG_RUNS", str(tmp_path))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    first = {"checkpoint": {"resume": "auto"}, "seed": 1}
    failed = _interrupted_run(tmp_path, "a", config_key(first), "failed", torchrun_run_id="none")
    fresh = tmp_path / "2026-01-02" / "f"
    (fresh / ".hydra").mkdir(parents=True)
    another = {"checkpoint": {"resume": "auto"}, "seed": 2}
    assert run_dir_for(another, fresh) == fresh
    assert run_dir_for(first, fresh) == failed  # its own restart takes it up
