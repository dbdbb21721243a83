"""Job traces for the simulator: the Philly-derived trace and plain CSV job lists.

A trace job is (arrival s, duration s at the reference device, cards, project, job class).
Philly carries no job class, so a seeded generator assigns one of the throughput table's
classes to each job: the same seed gives the same workload for every policy compared.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from xirang_service.pool.cards import DEFAULT_CLASS
from xirang_service.pool.errors import PoolError


@dataclass(frozen=True)
class TraceJob:
    arrival: float
    duration: float
    cards: int
    project: str
    job_class: str = DEFAULT_CLASS
    priority: int = 1


def load(
    path: str | Path,
    classes: list[str],
    seed: int = 0,
    limit: int | None = None,
    load: float = 1.0,
) -> list[TraceJob]:
    """Jobs of a trace file sorted by arrival, starting at time 0. ``load`` scales the offered
    load: every inter-arrival time is divided by it (2.0 brings the same jobs in half the
    time), so the work is the trace's and only how busy the pool is changes."""
    if not load > 0:
        raise PoolError(f"load {load}: a positive factor (1 replays the trace as recorded)")
    path = Path(path)
    if not path.exists():
        raise PoolError(f"trace {path} does not exist")
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        columns = set(reader.fieldnames or ())
        if {"timestamp", "duration", "num_gpus"} <= columns:
            rows = [_philly(row) for row in reader]
        elif {"arrival", "duration", "cards"} <= columns:
            rows = [_plain(row) for row in reader]
        else:
            raise PoolError(
                f"trace {path}: columns {sorted(columns)} are neither Philly's "
                "(timestamp,duration,num_gpus,cluster) nor arrival,duration,cards[,project,...]"
            )
    rows.sort(key=lambda r: r[0])
    rows = rows[:limit] if limit else rows
    rng = random.Random(seed)
    choices = classes or [DEFAULT_CLASS]
    t0 = rows[0][0] if rows else 0.0
    return [
        TraceJob((arrival - t0) / load, duration, cards, project, cls or rng.choice(choices), prio)
        for arrival, duration, cards, project, cls, prio in rows
    ]


def _philly(row: dict[str, str]) -> tuple:
    stamp = datetime.fromisoformat(row["timestamp"]).timestamp()
    return (stamp, max(1.0, float(row["duration"])), int(row["num_gpus"]), row["cluster"], "", 1)


def _plain(row: dict[str, str]) -> tuple:
    return (
        float(row["arrival"]),
        max(1.0, float(row["duration"])),
        int(row["cards"]),
        row.get("project") or "default",
        row.get("job_class") or "",
        int(row.get("priority") or 1),
    )
