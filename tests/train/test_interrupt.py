"""A SIGTERM inside a run becomes a checkpoint at the end of the step, then a clean stop."""

from __future__ import annotations

import os
import signal
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
