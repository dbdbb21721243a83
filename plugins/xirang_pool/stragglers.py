"""Passes a balanced run's stragglers on to the pool.

A run with ``parallel.balance=adaptive`` writes a ``straggler`` event when a rank stays far
below its calibrated speed (the run absorbs it by moving work off the rank). Under the pool, the
submitter reads those events of the current placement (in the local executor's watch thread, or
while it follows a Slurm executor's job: the run directory is on a shared filesystem) and
reports each once
(``POST /v1/jobs/<id>/straggler``) with what the pool needs to weigh a drain: the ranks'
measured speeds, the step's micro-batches, the steps left and what a restart costs this run
(from the placement's start to its first training step). What the pool did is printed; with
``xirang pool serve --drain-stragglers`` it may drain the node, and the watch then sees the
job requeued and stops the workers as for any drain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xirang.launch import SEGMENTS_FILE, read_config, read_events
from xirang.pool import PoolClient, PoolError


class StragglerRelay:
    """The straggler events of one placement of a job, each reported to the pool once."""

    def __init__(self, client: PoolClient, job_id: int, run_dir: str, started: float) -> None:
        self.client, self.job_id, self.run_dir, self.started = client, job_id, run_dir, started
        self.reported: set[int] = set()  # ranks

    def poll(self) -> None:
        """Report the placement's new straggler events; a pool that cannot be reached now is
        asked again at the next poll."""
        for event in read_events(self.run_dir):
            if event["event"] != "straggler" or event["time"] < self.started:
                continue  # another kind, or an earlier placement's
            if event["rank"] in self.reported or "speeds" not in event:
                continue
            body = self._body(event)
            if body is None:
                return  # the first step of this placement is not recorded yet
            try:
                answer = self.client.straggler(self.job_id, body)
            except (PoolError, OSError) as exc:
                if isinstance(exc, PoolError) and 400 <= exc.status < 500:
                    self.reported.add(event["rank"])  # refused: asking again changes nothing
                    print(f"pool: straggler rank {event['rank']} not taken: {exc}")
                return
            self.reported.add(event["rank"])
            print(f"pool: straggler rank {event['rank']} {answer['action']}: {answer['why']}")

    def _body(self, event: dict[str, Any]) -> dict[str, Any] | None:
        first_step = self._first_step_time()
        if first_step is None:
            return None
        max_steps = read_config(self.run_dir)["trainer"]["max_steps"]
        return {
            "rank": event["rank"],
            "speed_ratio": max(event["speed_ratio"], 1e-6),
            "speeds": event["speeds"],
            "micro_batches": event["of"],
            "remaining_steps": max(0, max_steps - event["step"]),
            "restart_s": round(max(0.0, first_step - self.started), 3),
        }

    def _first_step_time(self) -> float | None:
        """When this placement's workers began their first training step (its segment's
        start), from the run's ``segments.jsonl``."""
        path = Path(self.run_dir, SEGMENTS_FILE)
        if not path.is_file():
            return None
        for line in path.read_text().splitlines():
            segment = json.loads(line) if line.strip() else {}
            if "start_step" in segment and segment.get("time", 0.0) >= self.started:
                return float(segment["time"])
        return None
