"""A SIGTERM inside a run becomes a checkpoint at the end of the step, then a clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from xirang_core.train.interrupt import RunInterrupted, StopAtStepEnd, stop_on


class FakeManager:
    def __init__(self) -> None:
        self.last_saved, self.saved, self.waited = 0, [], 0

    def save(self, step: int) -> None:
        self.saved.append(step)
        self.last_saved = step

    def wait(self, raise_errors: bool = False) -> None:
        self.waited += 1


def _stopper() -> tuple[StopAtStepEnd, SimpleNamespace]:
    guard = SimpleNamespace(
        manager=FakeManager(),
        heartbeat=SimpleNamespace(stop=lambda: None),
        on_step_end=lambda step: None,
    )
    return StopAtStepEnd(guard, SimpleNamespace(world_size=1, run_dir="run")), guard


def test_sigterm_saves_the_current_step_and_stops() -> None:
    stopper, guard = _stopper()
    before = signal.getsignal(signal.SIGTERM)
    with stop_on():
        stopper(1)
        os.kill(os.getpid(), signal.SIGTERM)  # handled: the process lives on
        with pytest.raises(RunInterrupted, match="continues from step 3"):
            stopper(2)
    assert guard.manager.saved == [2] and guard.manager.waited == 1
    assert signal.getsignal(signal.SIGTERM) == before  # the old handler is back


def test_a_new_run_starts_without_an_old_stop_request() -> None:
    stopper, guard = _stopper()
    with stop_on():
        os.kill(os.getpid(), signal.SIGTERM)
    with stop_on():
        stopper(1)  # the earlier request belonged to the earlier run
    assert guard.manager.saved == []


@pytest.mark.slow
def test_two_workers_stopped_by_ctrl_c_checkpoint_and_say_how_to_resume(tmp_path) -> None:
    """Ctrl-C reaches the whole process group, launcher and workers, as a terminal sends it."""
    run_dir = tmp_path / "run"
    args = ["trainer.nproc=2", "parallel=ddp", "trainer.max_steps=5000", "checkpoint.interval=0"]
    args.append(f"hydra.run.dir={run_dir}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "xirang", *args],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "300"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not _logged_steps(run_dir / "metrics.jsonl") and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-2000:]
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        output = proc.communicate(timeout=600)[0]
    finally:
        proc.kill()
    assert proc.returncode == 130, output[-2000:]
    assert (
        output.rstrip()
        .splitlines()[-1]
        .endswith(f"Resume with: cd {tmp_path} && python -m xirang {' '.join(args)}")
    ), output[-2000:]
    assert "Traceback" not in output
    events = [json.loads(line) for line in (run_dir / "checkpoint_events.jsonl").open()]
    assert len({e["step"] for e in events if e["event"] == "save"}) == 1  # the stop's save
    assert json.loads((run_dir / "resume.json").read_text())["state"] == "interrupted"


def _logged_steps(path) -> bool:
    return path.exists() and path.stat().st_size > 0
