"""The core's tracker session: each logged step reaches the tracker exactly once however often
the run restarts from a checkpoint, always in the tracker run it started first; a tracker that
raises is switched off with one warning and the rest of the run's calls return."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang.tracking.session import TrackerSession
from xirang_core.specs import Tracker


class Recorder:
    """A tracker that keeps what it is sent, in memory (the protocol, nothing more)."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at, self.opened = fail_at, 0
        self.steps: list[int] = []
        self.ids: list[str | None] = []
        self.ended: list[Any] = []

    def start(self, run_dir: Path, config: Mapping[str, Any], run_id: str | None) -> str:
        self.ids.append(run_id)
        self.opened += 1
        return run_id or "run-1"

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        if step == self.fail_at:
            raise ConnectionError("server down\nsecond line")
        assert metrics == {"loss": float(step)}
        self.steps.append(step)

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        self.ended.append(summary)


def attempt(tracker: Recorder, run_dir: Path, first: int, last: int, ok: bool) -> None:
    """One worker process: start, log steps ``first..last``, end (or fail)."""
    session = TrackerSession("recorder", tracker, run_dir)
    session.start({})
    for step in range(first, last + 1):
        session.log(step, {"step": step, "loss": step, "note": "text", "flag": True})
    session.finish({"steps": last} if ok else None)


def test_recorder_is_a_tracker() -> None:
    assert isinstance(Recorder(), Tracker)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(1, 8)), max_size=4))
def test_each_step_once_across_restarts(
    tmp_path_factory: pytest.TempPathFactory, restarts: list[tuple[int, int]]
) -> None:
    """Each failed attempt reached some step; the next resumes from a checkpoint at or before it."""
    run_dir, tracker = tmp_path_factory.mktemp("run"), Recorder()
    resume = highest = 0
    for back, ahead in restarts:
        reached = resume + ahead
        attempt(tracker, run_dir, resume + 1, reached, ok=False)
        resume, highest = max(0, reached - back), max(highest, reached)
    final = highest + 3  # the run's max_steps lies past every step an attempt reached
    attempt(tracker, run_dir, resume + 1, final, ok=True)
    assert tracker.steps == list(range(1, final + 1))
    assert tracker.ids == [None] + ["run-1"] * len(restarts)
    assert tracker.ended[-1] == {"steps": final}


def test_steps_a_killed_worker_never_delivered_come_from_metrics_jsonl(tmp_path: Path) -> None:
    """The first worker logged steps 1-4 and died before its tracker took any (its tracker run
    was still starting); the restart resumes from the step-2 checkpoint."""
    lines = [json.dumps({"step": s, "loss": s}) for s in range(1, 5)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 5, "lo')  # cut short
    tracker = Recorder()
    attempt(tracker, tmp_path, 3, 6, ok=True)
    assert tracker.steps == [1, 2, 3, 4, 5, 6]


def test_a_failing_tracker_warns_once_and_is_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = Recorder(fail_at=3)
    with caplog.at_level(logging.WARNING, logger="xirang.tracking"):
        attempt(tracker, tmp_path, 1, 6, ok=True)
    assert tracker.steps == [1, 2]
    assert tracker.ended == []  # off after the failure: nothing more is sent
    [warning] = caplog.messages
    assert "tracker recorder failed" in warning and "ConnectionError: server down" in warning
    assert "\n" not in warning and "training goes on" in warning
