"""One tracker's session in one worker process: a thread, a queue, and the state it resumes.

The training loop only puts work on the queue (microseconds); the thread talks to the tracker.
``<run dir>/trackers/<name>.json`` keeps the tracker's run id and the last step it holds, so a
restarted worker (or a run resumed in its run directory) continues that run and never sends a
step twice, although it trains again the steps since its checkpoint; the steps the run logged
that its tracker never received are sent from ``metrics.jsonl`` first.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xirang_core.paths import replace_text
from xirang_core.train.report import METRICS_FILE

log = logging.getLogger("xirang.tracking")

STATE_DIR = "trackers"
#: how long the end of a run waits for a tracker to take its last figures and files; a failing
#: run waits less (its launcher may be about to kill it)
FINISH_TIMEOUT_S, FAULT_TIMEOUT_S = 120.0, 10.0

#: the summary's figures measured after the last step, sent to trackers at that step
FINAL_FIGURES = ("val_loss", "val_bpb")


class TrackerSession:
    def __init__(self, name: str, tracker: Any, run_dir: Path) -> None:
        self.name, self.tracker, self.run_dir = name, tracker, run_dir
        self.state_path = run_dir / STATE_DIR / f"{name}.json"
        state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.run_id: str | None = state.get("run_id")
        self.last_step: int = state.get("last_step", 0)
        self.queued_step = self.last_step
        self.evaluated: set[int] = set()  # steps whose figures this session sent a val_loss in
        self.failed = False
        self.work: queue.SimpleQueue[tuple[Callable[..., None], tuple] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"xirang-{name}", daemon=True)

    def start(self, config: Mapping[str, Any]) -> None:
        """Open the tracker's run, then catch it up from ``metrics.jsonl``: steps a killed
        worker logged there but never delivered (its tracker was still starting, or its queue
        died with it) come before the steps this worker trains."""
        self.work.put((self._start, (config,)))
        for record in logged_records(self.run_dir):
            self.log(record["step"], record)
        self.thread.start()

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Queue one logged step, unless the tracker holds it already (a restart's replay)."""
        if step <= self.queued_step:
            return
        self.queued_step = step
        if "val_loss" in metrics:
            self.evaluated.add(step)
        self.work.put((self._log, (step, numbers(metrics))))

    def finish(self, summary: Mapping[str, Any] | None) -> None:
        """Send the end (``summary`` None: the run failed) and wait for the thread. The final
        validation loss is measured after the last step was logged, so it goes as a figure of
        that step (unless that step's record held it): a tracker that ranks runs on
        ``val_loss`` ranks on the final one."""
        if summary is not None and summary.get("steps") not in self.evaluated:
            final = numbers({k: summary[k] for k in FINAL_FIGURES if k in summary})
            if final:
                self.work.put((self._log, (summary["steps"], final)))
        self.work.put((self.tracker.finish, (summary, self.run_dir)))
        self.work.put(None)
        timeout = FINISH_TIMEOUT_S if summary is not None else FAULT_TIMEOUT_S
        self.thread.join(timeout)
        if self.thread.is_alive():
            log.warning(
                "tracker %s: still busy after %.0f s at the end of the run; left behind "
                "(the run's own files are complete)",
                self.name,
                timeout,
            )

    def _serve(self) -> None:
        while (item := self.work.get()) is not None:
            if self.failed:
                continue
            call, args = item
            try:
                call(*args)
            except Exception as exc:  # a tracker never stops training: one warning, then off
                self.failed = True
                log.warning(
                    "tracker %s failed and is off for the rest of this run (%s: %s); training "
                    "goes on and the run's own files are intact",
                    self.name,
                    type(exc).__name__,
                    one_line(str(exc)),
                )

    def _start(self, config: Mapping[str, Any]) -> None:
        self.run_id = self.tracker.start(self.run_dir, config, self.run_id)
        self._save_state()

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        self.tracker.log(step, metrics)
        self.last_step = step
        self._save_state()

    def _save_state(self) -> None:
        self.state_path.parent.mkdir(exist_ok=True)
        state = {"run_id": self.run_id, "last_step": self.last_step}
        replace_text(self.state_path, json.dumps(state))


def logged_records(run_dir: Path) -> list[dict[str, Any]]:
    """The run's ``metrics.jsonl`` so far (a line cut short by a kill is left out)."""
    path = run_dir / METRICS_FILE
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return [r for r in records if isinstance(r, dict) and "step" in r]


def numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A record's figures a tracker can plot: numbers other than the step itself."""
    return {
        key: float(value)
        for key, value in metrics.items()
        if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
    }


def one_line(text: str, limit: int = 240) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."
