"""The pool's state: jobs, projects, nodes, devices, events and usage segments, in an SQLite
file or, for a shared deployment, PostgreSQL (:mod:`xirang_core.pool.database`; one SQL text).

The service writes through after every change, in one transaction, so a restart of
``xirang pool serve`` loses no queued or running job: :func:`PoolStore.load_into` rebuilds the
engine from these tables. The tables and the read API below (:meth:`jobs`, :meth:`nodes`,
:meth:`devices`, :meth:`usage`, :meth:`events`) are a documented contract (docs/pool.md) that
the console and cost metering build on; ``schema_version`` in ``meta`` changes when they do.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xirang_core.pool.cluster import Cluster
from xirang_core.pool.database import Database, connect
from xirang_core.pool.engine import Event, PoolEngine, Segment
from xirang_core.pool.jobs import Job, JobState
from xirang_core.pool.quota import Project

SCHEMA_VERSION = 1

# Portable SQL: DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes, too coarse for Unix times),
# "end" quoted (reserved in PostgreSQL) and {serial} for the dialect's auto-increment key.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY, team TEXT NOT NULL, guaranteed INTEGER NOT NULL,
    borrow_limit INTEGER, token_hash TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY, type TEXT NOT NULL, devices INTEGER NOT NULL, leaf TEXT NOT NULL,
    spine TEXT NOT NULL, domain_size INTEGER NOT NULL, healthy INTEGER NOT NULL,
    drain_reason TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS devices (
    id INTEGER PRIMARY KEY, node TEXT NOT NULL REFERENCES nodes(name), type TEXT NOT NULL,
    idx INTEGER NOT NULL, job_id INTEGER);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, project TEXT NOT NULL, job_class TEXT NOT NULL,
    cards INTEGER NOT NULL, priority INTEGER NOT NULL, state TEXT NOT NULL,
    submitted DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION, finished DOUBLE PRECISION,
    attained DOUBLE PRECISION NOT NULL,
    device_type TEXT NOT NULL, devices TEXT NOT NULL, borrowed INTEGER NOT NULL,
    preemptions INTEGER NOT NULL, requeues INTEGER NOT NULL, payload TEXT NOT NULL,
    allow_mixing INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, project);
CREATE TABLE IF NOT EXISTS events (
    seq {serial}, time DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL,
    job_id INTEGER, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
    job_id INTEGER NOT NULL, project TEXT NOT NULL, device_type TEXT NOT NULL,
    start DOUBLE PRECISION NOT NULL, "end" DOUBLE PRECISION NOT NULL, devices INTEGER NOT NULL,
    cards INTEGER NOT NULL,
    borrowed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS usage_by_project ON usage(project, start);
"""

_JOB_COLUMNS = (
    "id, name, project, job_class, cards, priority, state, submitted, started, finished, "
    "attained, device_type, devices, borrowed, preemptions, requeues, payload, allow_mixing"
)
#: columns added after the first release: (table, column, type) for stores made before them
_ADDED_COLUMNS = (("jobs", "allow_mixing", "INTEGER NOT NULL DEFAULT 0"),)


def upsert(table: str, columns: Sequence[str], key: str) -> str:
    """``INSERT ... ON CONFLICT (key) DO UPDATE``: a replace both SQLite and PostgreSQL run."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c != key)
    marks = ",".join("?" * len(columns))
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


_UPSERT_NODE = upsert(
    "nodes",
    ("name", "type", "devices", "leaf", "spine", "domain_size", "healthy", "drain_reason"),
    "name",
)
_UPSERT_PROJECT = upsert(
    "projects", ("name", "team", "guaranteed", "borrow_limit", "token_hash"), "name"
)
_UPSERT_JOB = upsert("jobs", tuple(c.strip() for c in _JOB_COLUMNS.split(",")), "id")
_UPSERT_META = upsert("meta", ("key", "value"), "key")


class PoolStore:
    """The pool's tables in an SQLite file (default; WAL, so other processes read while the
    service writes) or in PostgreSQL for a ``postgresql://`` location, with one SQL text."""

    def __init__(self, location: str | Path) -> None:
        self.db: Database = connect(location)
        self.path = self.db.location  # no password in it: safe to print
        self.db.script(SCHEMA.format(serial=self.db.serial_key))
        self._add_columns()
        self.db.execute(
            "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
            (str(SCHEMA_VERSION),),
        )

    def _add_columns(self) -> None:
        """Bring a store made by an earlier version up to the current columns."""
        for table, column, kind in _ADDED_COLUMNS:
            if column not in self.db.columns(table):
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self.db.close()

    # --- writing ----------------------------------------------------------------------------

    def initialised(self) -> bool:
        return self.db.execute("SELECT COUNT(*) AS n FROM nodes").fetchone()["n"] > 0

    def meta(self, key: str) -> str | None:
        """A value of the ``meta`` table (the schema version, the service's cluster spec)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(_UPSERT_META, (key, value))

    def save_cluster(self, cluster: Cluster, reasons: dict[str, str] | None = None) -> None:
        reasons = reasons or {}
        with self._tx():
            for n in cluster.nodes:
                self.db.execute(
                    _UPSERT_NODE,
                    (
                        n.name,
                        n.type,
                        n.size,
                        n.leaf,
                        n.spine,
                        n.domain_size,
                        int(n.healthy),
                        reasons.get(n.name, ""),
                    ),
                )
                self.db.executemany(
                    "INSERT INTO devices (id, node, type, idx) VALUES (?,?,?,?) "
                    "ON CONFLICT (id) DO NOTHING",
                    [(d, n.name, n.type, d - n.first_device) for d in n.devices],
                )

    def save_project(self, project: Project) -> None:
        with self._tx():
            self.db.execute(
                _UPSERT_PROJECT,
                (
                    project.name,
                    project.team,
                    project.guaranteed,
                    project.borrow_limit,
                    project.token_hash,
                ),
            )

    def persist(self, engine: PoolEngine, jobs: Iterable[Job], events: list[Event]) -> None:
        """Write changed jobs, new events, finished usage segments and device ownership."""
        with self._tx():
            for job in jobs:
                self._save_job(job)
            self.db.executemany(
                "INSERT INTO events (time, kind, job_id, detail) VALUES (?,?,?,?)",
                [(e.time, e.kind, e.job, json.dumps(e.detail)) for e in events],
            )
            self._save_segments(engine.segments)
            engine.segments.clear()
            self._save_nodes_health(engine.cluster, events)

    def _save_job(self, job: Job) -> None:
        self.db.execute(
            _UPSERT_JOB,
            (
                job.id,
                job.name,
                job.project,
                job.job_class,
                job.cards,
                job.priority,
                job.state.value,
                job.submitted,
                job.started,
                job.finished,
                job.attained,
                job.device_type,
                json.dumps(list(job.devices)),
                int(job.borrowed),
                job.preemptions,
                job.requeues,
                json.dumps(job.payload),
                int(job.allow_mixing),
            ),
        )
        self.db.execute("UPDATE devices SET job_id = NULL WHERE job_id = ?", (job.id,))
        if job.devices:
            self.db.executemany(
                "UPDATE devices SET job_id = ? WHERE id = ?", [(job.id, d) for d in job.devices]
            )

    def _save_segments(self, segments: list[Segment]) -> None:
        self.db.executemany(
            "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?)",
            [
                (
                    s.job,
                    s.project,
                    s.device_type,
                    s.start,
                    s.end,
                    s.devices,
                    s.cards,
                    int(s.borrowed),
                )
                for s in segments
            ],
        )

    def _save_nodes_health(self, cluster: Cluster, events: list[Event]) -> None:
        for event in events:
            if event.kind in ("node_drained", "node_restored"):
                name = event.detail["node"]
                self.db.execute(
                    "UPDATE nodes SET healthy = ?, drain_reason = ? WHERE name = ?",
                    (int(cluster.node(name).healthy), event.detail.get("reason", ""), name),
                )

    def _tx(self) -> Any:
        return self.db.transaction()

    # --- loading ----------------------------------------------------------------------------

    def cluster_nodes(self) -> list[dict[str, Any]]:
        """Node specs in device-id order, as :class:`Cluster` takes them."""
        rows = self.db.execute(
            "SELECT n.*, MIN(d.id) AS first FROM nodes n JOIN devices d ON d.node = n.name "
            "GROUP BY n.name ORDER BY first"
        ).fetchall()
        return [
            {
                "name": r["name"],
                "type": r["type"],
                "devices": r["devices"],
                "leaf": r["leaf"],
                "spine": r["spine"],
                "domain_size": r["domain_size"],
                "healthy": bool(r["healthy"]),
            }
            for r in rows
        ]

    def projects(self) -> list[Project]:
        rows = self.db.execute("SELECT * FROM projects ORDER BY name").fetchall()
        return [
            Project(r["name"], r["guaranteed"], r["borrow_limit"], r["team"], r["token_hash"])
            for r in rows
        ]

    def load_into(self, engine: PoolEngine, now: float) -> int:
        """Queued and running jobs back into ``engine``; returns how many were restored."""
        for project in self.projects():
            engine.quotas.upsert(project)
        restored = 0
        for job in self.jobs():
            if not job.state.finished:
                engine.reload(job, now)
                restored += 1
            engine.next_id = max(engine.next_id, job.id + 1)
        return restored

    # --- the read API (for the console and cost metering) -----------------------------------

    def jobs(
        self, project: str | None = None, states: Iterable[str] = (), ids: Iterable[int] = ()
    ) -> list[Job]:
        """Jobs, oldest first, optionally of one project, some states and some ids (cost
        metering reads only the jobs whose usage changed)."""
        query, args = f"SELECT {_JOB_COLUMNS} FROM jobs WHERE 1=1", []
        if project:
            query, args = query + " AND project = ?", [*args, project]
        for column, values in (("state", list(states)), ("id", list(ids))):
            if values:
                query += f" AND {column} IN ({','.join('?' * len(values))})"
                args.extend(values)
        return [_job(r) for r in self.db.execute(query + " ORDER BY id", args)]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with its health and how many of its devices are in use."""
        rows = self.db.execute(
            "SELECT n.*, COUNT(d.job_id) AS used FROM nodes n LEFT JOIN devices d "
            "ON d.node = n.name GROUP BY n.name ORDER BY n.name"
        )
        return [dict(r) for r in rows]

    def devices(self) -> list[dict[str, Any]]:
        """Every device: id, node, type, index on its node and the job holding it (or None)."""
        return [dict(r) for r in self.db.execute("SELECT * FROM devices ORDER BY id")]

    def usage(
        self,
        since: float = 0.0,
        until: float = float("inf"),
        bucket_s: float = 3600.0,
        project: str | None = None,
    ) -> list[dict[str, Any]]:
        """Device-seconds and card-seconds per (project, device type, time bucket).

        Each usage segment is clipped to [since, until) and split across buckets, so the sums
        are exact for any bucket size.
        """
        query = 'SELECT * FROM usage WHERE "end" > ? AND start < ?'
        args: list[Any] = [since, until if until != float("inf") else 1e30]
        if project:
            query, args = query + " AND project = ?", [*args, project]
        totals: dict[tuple[str, str, float], list[float]] = {}
        for row in self.db.execute(query, args):
            _spread(totals, row, max(row["start"], since), min(row["end"], until), bucket_s)
        return [
            {
                "project": p,
                "device_type": t,
                "bucket_start": b,
                "device_seconds": v[0],
                "card_seconds": v[1],
            }
            for (p, t, b), v in sorted(totals.items(), key=lambda kv: (kv[0][2], kv[0][:2]))
        ]

    def segments(self) -> list[dict[str, Any]]:
        """The raw usage rows, one per stretch a job held devices, oldest first."""
        return [dict(r) for r in self.db.execute("SELECT * FROM usage ORDER BY start, job_id")]

    def events(self, after_seq: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)
        )
        return [{**dict(r), "detail": json.loads(r["detail"])} for r in rows]


def _spread(
    totals: dict, row: Mapping[str, Any], start: float, end: float, bucket_s: float
) -> None:
    t = start
    while t < end:
        bucket = (t // bucket_s) * bucket_s
        stop = min(end, bucket + bucket_s)
        entry = totals.setdefault((row["project"], row["device_type"], bucket), [0.0, 0.0])
        entry[0] += row["devices"] * (stop - t)
        entry[1] += row["cards"] * (stop - t)
        t = stop


def _job(row: Mapping[str, Any]) -> Job:
    return Job(
        id=row["id"],
        project=row["project"],
        cards=row["cards"],
        job_class=row["job_class"],
        priority=row["priority"],
        name=row["name"],
        submitted=row["submitted"],
        state=JobState(row["state"]),
        started=row["started"],
        finished=row["finished"],
        attained=row["attained"],
        devices=tuple(json.loads(row["devices"])),
        device_type=row["device_type"],
        borrowed=bool(row["borrowed"]),
        preemptions=row["preemptions"],
        requeues=row["requeues"],
        payload=json.loads(row["payload"]),
        allow_mixing=bool(row["allow_mixing"]),
    )
