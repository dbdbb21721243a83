"""A heartbeat per worker, and a watchdog that turns a hang into a restart.

Each worker rewrites ``<run dir>/heartbeat/rank<r>.json`` (step, time, pid, host) every few
seconds from a daemon thread, so a person or a scheduler can see which worker stopped making
progress. With ``hang_timeout_s`` set, a worker whose step has not advanced for that long exits
with :data:`HANG_EXIT` and a ``hang`` event; the scheduler then restarts the run from its
latest checkpoint without that worker's device, instead of waiting forever on a collective that
will never complete.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from xirang_core.checkpoint.events import record_event
from xirang_core.paths import replace_text

log = logging.getLogger("xirang.faults")
HEARTBEAT_DIR = "heartbeat"
HANG_EXIT = 75


class Heartbeat:
    """Writes this worker's liveness; ``beat(step)`` is a plain attribute store, free per step."""

    def __init__(self, run_dir: str, rank: int, every_s: float, hang_timeout_s: float) -> None:
        self.path = Path(run_dir) / HEARTBEAT_DIR / f"rank{rank}.json"
        self.run_dir, self.rank = run_dir, rank
        self.every_s, self.hang_timeout_s = max(every_s, 0.05), hang_timeout_s
        self.step = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="xirang-heartbeat", daemon=True)
        self._thread.start()
        return self

    def beat(self, step: int) -> None:
        self.step = step

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        seen, since = self.step, time.monotonic()
        while not self._stop.wait(self.every_s):
            self._write()
            if self.step != seen:
                seen, since = self.step, time.monotonic()
            elif self.hang_timeout_s and seen and time.monotonic() - since > self.hang_timeout_s:
                self._give_up(seen)

    def _write(self) -> None:
        beat = {
            "rank": self.rank,
            "step": self.step,
            "time": time.time(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        replace_text(self.path, json.dumps(beat))

    def _give_up(self, step: int) -> None:
        """No progress for too long: leave, so the launcher restarts from a checkpoint."""
        message = f"rank {self.rank} made no progress past step {step} in {self.hang_timeout_s} s"
        log.error("%s; exiting so the run restarts from its latest checkpoint", message)
        record_event(self.run_dir, "hang", rank=self.rank, step=step, reason=message)
        os._exit(HANG_EXIT)
