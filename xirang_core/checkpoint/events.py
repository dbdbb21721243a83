"""``checkpoint_events.jsonl`` in the run directory: saves, restores, skips and faults, one JSON
object a line, so a person (or ``xirang drill``) can tell what happened across restarts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

EVENTS_FILE = "checkpoint_events.jsonl"


def record_event(run_dir: str | Path, kind: str, **fields: Any) -> None:
    """Append one event; a single short write in append mode, so concurrent ranks never
    interleave within a line."""
    line = json.dumps({"event": kind, "time": round(time.time(), 3), "pid": os.getpid(), **fields})
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(run_dir) / EVENTS_FILE, "a") as f:
        f.write(line + "\n")


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recovery_note(run_dir: str | Path) -> str:
    """One line for a failed run's report: its newest committed checkpoint and how to resume."""
    saves = [e for e in read_events(run_dir) if e["event"] == "save"]
    if not saves:
        return "no checkpoint was committed; the run must start over"
    step = max(e["step"] for e in saves)
    return f"latest checkpoint: step {step}; resume with checkpoint.resume={run_dir}"
