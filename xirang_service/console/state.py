"""A consistent read of the pool's state from its SQLite store (the pool's read API).

The console and the cost meter never keep their own copy of the pool: they read the store the
pool service writes through (``xirang pool serve --state FILE``; WAL mode lets other processes
read while it writes). One :func:`read_state` is one snapshot; the console caches it briefly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xirang_service.pool.database import TOKEN_SUFFIX, beside_state
from xirang_service.pool.jobs import Job
from xirang_service.pool.quota import Project
from xirang_service.pool.store import PoolStore

#: job states the console lists
LIVE = ("queued", "running")
#: the environment variable the pool service reads its operator token from
OPERATOR_TOKEN_ENV = "XIRANG_POOL_OPERATOR_TOKEN"


@dataclass
class PoolState:
    """Nodes (with use, health and drain reason), jobs, projects and closed usage segments."""

    nodes: list[dict[str, Any]]
    jobs: list[Job]
    projects: list[Project]
    segments: list[dict[str, Any]] = field(default_factory=list)
    read_at: float = 0.0
    device_types: dict[int, str] = field(default_factory=dict)  # for jobs placed on several

    def live_jobs(self) -> list[Job]:
        return [j for j in self.jobs if not j.state.finished]


def read_state(store: PoolStore, now: float | None = None, usage: bool = False) -> PoolState:
    """What the console shows, read in one go from the pool's store: nodes, projects and the
    queued and running jobs. ``usage`` adds what metering needs as well: every job (finished
    ones carry the payload that refines their charge) and the closed usage segments."""
    jobs = store.jobs() if usage else store.jobs(states=LIVE)
    return PoolState(
        nodes=store.nodes(),
        jobs=jobs,
        projects=store.projects(),
        segments=usage_segments(store) if usage else [],
        read_at=time.time() if now is None else now,
        device_types=_device_types(store, jobs) if usage else {},
    )


def read_usage_since(store: PoolStore, since_end: float | None, now: float) -> PoolState:
    """What incremental metering needs: the usage segments that closed at ``since_end`` or
    later, the running jobs, the jobs those segments belong to, and the projects (teams)."""
    segments = usage_segments(store, since_end)
    running = store.jobs(states=("running",))
    closed_ids = sorted({s["job_id"] for s in segments} - {j.id for j in running})
    jobs = running + (store.jobs(ids=closed_ids) if closed_ids else [])
    return PoolState([], jobs, store.projects(), segments, now, _device_types(store, running))


def _device_types(store: PoolStore, jobs: list[Job]) -> dict[int, str]:
    """Each device's type, read only when a running job spans several types (metering splits
    its charge by type); empty otherwise, so a tick on a large pool does not read every device."""
    mixed = any(j.state.value == "running" and len(j.held_types) > 1 for j in jobs)
    return {d["id"]: d["type"] for d in store.devices()} if mixed else {}


def usage_segments(store: PoolStore, since_end: float | None = None) -> list[dict[str, Any]]:
    """The raw usage rows (one per stretch a job held devices), which metering charges one by
    one; the pool's own ``usage()`` sums them into buckets, losing the job each belongs to.
    ``since_end``: only the segments that closed then or later."""
    if since_end is None:
        rows = store.db.execute("SELECT * FROM usage ORDER BY start, job_id")
    else:
        sql = 'SELECT * FROM usage WHERE "end" >= ? ORDER BY start, job_id'
        rows = store.db.execute(sql, (since_end,))
    return [dict(r) for r in rows]


def operator_token(state_path: str | Path) -> str:
    """The pool's operator token: its environment variable, else the file the service keeps
    beside that state (read only; empty when neither exists): an SQLite file's neighbour, or
    the file named by a hash of a database URL."""
    if os.environ.get(OPERATOR_TOKEN_ENV):
        return os.environ[OPERATOR_TOKEN_ENV]
    path = beside_state(str(state_path), TOKEN_SUFFIX)
    return path.read_text().strip() if path.exists() else ""
