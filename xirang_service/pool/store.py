"""The pool's state: jobs, projects, nodes, devices, events and usage segments, in an SQLite
file or, for a shared deployment, PostgreSQL (:mod:`xirang_service.pool.database`; one SQL text).

The service writes through after every change, in one transaction, so a restart of
``xirang pool serve`` loses no queued or running job: :func:`PoolStore.load_into` rebuilds the
engine from these tables. The tables and the read API below (:meth:`jobs`, :meth:`nodes`,
:meth:`devices`, :meth:`usage`, :meth:`events`) are a documented contract (docs/pool.md) that
the console and cost metering build on; ``schema_version`` in ``meta`` changes when they do.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from xirang_service.pool.cluster import Inventory
from xirang_service.pool.database import Database, connect, one_row
from xirang_service.pool.engine import Event, PoolEngine, Segment
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import Job, JobState, check_payload, parse_priority
from xirang_service.pool.quota import (
    DEFAULT_MAX_JOBS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_UMASK,
    Project,
)

SCHEMA_VERSION = 1
log = logging.getLogger("xirang.pool")
T = TypeVar("T")

# Portable SQL: DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes, too coarse for Unix times),
# "end" quoted (reserved in PostgreSQL) and {serial} for the dialect's auto-increment key.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY, team TEXT NOT NULL, guaranteed INTEGER NOT NULL,
    borrow_limit INTEGER, token_hash TEXT NOT NULL DEFAULT '',
    max_priority INTEGER NOT NULL DEFAULT 1, run_as TEXT NOT NULL DEFAULT '',
    max_jobs INTEGER NOT NULL DEFAULT {max_jobs},
    max_payload_bytes BIGINT NOT NULL DEFAULT {max_payload},
    rate DOUBLE PRECISION NOT NULL DEFAULT 0, burst INTEGER NOT NULL DEFAULT 0,
    umask INTEGER NOT NULL DEFAULT {umask});
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
CREATE INDEX IF NOT EXISTS usage_by_job ON usage(job_id);
CREATE TABLE IF NOT EXISTS handles (job_id INTEGER PRIMARY KEY, handle TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submit_keys (
    project TEXT NOT NULL, key TEXT NOT NULL, job_id INTEGER NOT NULL,
    digest TEXT NOT NULL DEFAULT '', PRIMARY KEY (project, key));
CREATE TABLE IF NOT EXISTS set_aside (
    kind TEXT NOT NULL, ref TEXT NOT NULL, reason TEXT NOT NULL, time DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (kind, ref));
"""

_JOB_COLUMNS = (
    "id, name, project, job_class, cards, priority, state, submitted, started, finished, "
    "attained, device_type, devices, borrowed, preemptions, requeues, payload, allow_mixing"
)
#: columns added after the first release: (table, column, type) for stores made before them
_ADDED_COLUMNS = (
    ("jobs", "allow_mixing", "INTEGER NOT NULL DEFAULT 0"),
    ("projects", "max_priority", "INTEGER NOT NULL DEFAULT 1"),
    ("projects", "run_as", "TEXT NOT NULL DEFAULT ''"),
    ("projects", "max_jobs", f"INTEGER NOT NULL DEFAULT {DEFAULT_MAX_JOBS}"),
    ("projects", "max_payload_bytes", f"BIGINT NOT NULL DEFAULT {DEFAULT_MAX_PAYLOAD_BYTES}"),
    ("projects", "rate", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
    ("projects", "burst", "INTEGER NOT NULL DEFAULT 0"),
    ("projects", "umask", f"INTEGER NOT NULL DEFAULT {DEFAULT_UMASK}"),
    ("submit_keys", "digest", "TEXT NOT NULL DEFAULT ''"),
)
#: the most time buckets one usage query may fill (a tiny bucket over a long range is a typo)
MAX_BUCKETS = 100_000


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
_PROJECT_COLUMNS = (
    "name",
    "team",
    "guaranteed",
    "borrow_limit",
    "token_hash",
    "max_priority",
    "run_as",
    "max_jobs",
    "max_payload_bytes",
    "rate",
    "burst",
    "umask",
)
_UPSERT_PROJECT = upsert("projects", _PROJECT_COLUMNS, "name")
#: the rows every reader skips: those a restart set aside
_NOT_ASIDE = "WHERE CAST(id AS TEXT) NOT IN (SELECT ref FROM set_aside WHERE kind = 'job')"
_NODE_ASIDE = "SELECT ref FROM set_aside WHERE kind = 'node'"
_DEVICES_NOT_ASIDE = (
    f"SELECT * FROM devices WHERE node NOT IN ({_NODE_ASIDE}) AND CAST(id AS TEXT) NOT IN "
    "(SELECT ref FROM set_aside WHERE kind = 'device') ORDER BY id"
)
_UPSERT_JOB = upsert("jobs", tuple(c.strip() for c in _JOB_COLUMNS.split(",")), "id")
_UPSERT_META = upsert("meta", ("key", "value"), "key")
_UPSERT_HANDLE = upsert("handles", ("job_id", "handle"), "job_id")


class PoolStore:
    """The pool's tables in an SQLite file (default; WAL, so other processes read while the
    service writes) or in PostgreSQL for a ``postgresql://`` location, with one SQL text."""

    def __init__(self, location: str | Path) -> None:
        self.db: Database = connect(location)
        self.path = self.db.location  # no password in it: safe to print
        #: rows read so far that the pool cannot use: (kind, ref) -> why
        self.unusable: dict[tuple[str, str], str] = {}
        self.db.script(
            SCHEMA.format(
                serial=self.db.serial_key,
                max_jobs=DEFAULT_MAX_JOBS,
                max_payload=DEFAULT_MAX_PAYLOAD_BYTES,
                umask=DEFAULT_UMASK,
            )
        )
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
        return one_row(self.db.execute("SELECT COUNT(*) AS n FROM nodes"))["n"] > 0

    def meta(self, key: str) -> str | None:
        """A value of the ``meta`` table (the schema version, the service's cluster spec)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def set_meta(self, key: str, value: str) -> None:
        with self._tx():  # a write: fenced like the others (a replica that lost its lease)
            self.db.execute(_UPSERT_META, (key, value))

    def save_handle(self, job_id: int, handle: str) -> None:
        """What the executor calls a started job (a Slurm job id), stored the moment it is
        known, so a restarted pool finds the job on its cluster again."""
        with self._tx():
            self.db.execute(_UPSERT_HANDLE, (job_id, handle))

    def submitted_as(self, project: str, key: str) -> tuple[int, str] | None:
        """The job a project's earlier submission with idempotency ``key`` made, if any, and
        the digest of what that submission asked for ('' for a key stored before digests)."""
        row = self.db.execute(
            "SELECT job_id, digest FROM submit_keys WHERE project = ? AND key = ?", (project, key)
        ).fetchone()
        return None if row is None else (int(row["job_id"]), str(row["digest"]))

    def handles(self) -> dict[int, str]:
        """The stored executor handle of every job, by job id."""
        rows = self.db.execute("SELECT job_id, handle FROM handles").fetchall()
        return {row["job_id"]: row["handle"] for row in rows}

    def save_cluster(self, cluster: Inventory, reasons: dict[str, str] | None = None) -> None:
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
            self._save_project(project)

    def _save_project(self, project: Project) -> None:
        self.db.execute(_UPSERT_PROJECT, tuple(getattr(project, c) for c in _PROJECT_COLUMNS))

    def persist(
        self,
        engine: PoolEngine,
        jobs: Iterable[Job],
        events: list[Event],
        projects: Iterable[Project] = (),
        keys: Iterable[tuple[str, str, int, str]] = (),
    ) -> None:
        """Write changed projects and jobs, new events, finished usage segments, device
        ownership and new submissions' idempotency ``keys`` (project, key, job id, digest of
        the request), in one transaction: all of it is stored, or (an exception) none of it."""
        with self._tx():
            self.db.executemany(
                "INSERT INTO submit_keys (project, key, job_id, digest) VALUES (?,?,?,?)",
                list(keys),
            )
            for project in projects:
                self._save_project(project)
            for job in jobs:
                self._save_job(job)
            self.db.executemany(
                "INSERT INTO events (time, kind, job_id, detail) VALUES (?,?,?,?)",
                [(e.time, e.kind, e.job, json.dumps(e.detail)) for e in events],
            )
            self._save_segments(engine.segments)
            self._save_nodes_health(engine.cluster, events)
        engine.segments.clear()

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

    def _save_nodes_health(self, cluster: Inventory, events: list[Event]) -> None:
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
        """Node specs in device-id order, as :class:`Inventory` takes them, each at its stored
        first device id. A node row the pool cannot use (columns of the wrong type, device rows
        that do not match it) and a device row of no node are left out and remembered in
        :attr:`unusable`, so a restart sets them aside; their device ids stay unused."""
        held: dict[str, list[Any]] = {}
        for d in self.db.execute(_DEVICES_NOT_ASIDE).fetchall():
            held.setdefault(d["node"], []).append(d)
        specs = []
        for row in self.db.execute(f"SELECT * FROM nodes WHERE name NOT IN ({_NODE_ASIDE})"):
            devices = held.pop(row["name"], [])
            spec = self._usable(partial(_node_spec, devices=devices), row, "node", row["name"])
            if spec is not None:
                specs.append(spec)
        for d in (d for devices in held.values() for d in devices):
            self._usable(_no_node, d, "device", d["id"])
        return sorted(specs, key=lambda s: s["first_device"])

    def projects(self) -> list[Project]:
        """The projects whose rows the pool can use (one it cannot is logged and skipped)."""
        rows = self.db.execute("SELECT * FROM projects ORDER BY name").fetchall()
        return [p for p in (self._usable(_project, r, "project", r["name"]) for r in rows) if p]

    def load_into(self, engine: PoolEngine, now: float) -> int:
        """Projects and jobs back into ``engine``; returns how many queued or running jobs were
        restored. A row the engine cannot take back (corrupted, a device held twice, an unknown
        project) is set aside: logged, listed by :meth:`set_aside` and skipped by every reader
        from then on, so the rest of the pool serves."""
        aside: list[tuple[str, str, str]] = []
        for project in self.projects():
            engine.quotas.upsert(project)
        restored = 0
        query = f"SELECT {_JOB_COLUMNS} FROM jobs {_NOT_ASIDE} ORDER BY id"
        for row in self.db.execute(query).fetchall():
            try:
                job = _checked_job(row)
                engine.reload(job, now)
            except (ValueError, TypeError, KeyError, PoolError) as exc:
                aside.append(("job", str(row["id"]), str(exc)))
                continue
            restored += 0 if job.state.finished else 1
        top = one_row(self.db.execute("SELECT MAX(id) AS top FROM jobs"))["top"]
        engine.next_id = max(engine.next_id, (top or 0) + 1)  # set-aside ids are not reused
        aside += [(kind, ref, why) for (kind, ref), why in self.unusable.items() if kind != "job"]
        self._set_aside(aside, now, engine)
        return restored

    def _set_aside(self, rows: list[tuple[str, str, str]], now: float, engine: PoolEngine) -> None:
        """Record the rows a restart could not use, and device ownership where it differs from
        the engine's (a device two stored jobs claimed belongs to the one restored); a store
        that matches the engine is not written to."""
        held = {d: job.id for job in engine.running_jobs() for d in job.devices}
        stored = self.db.execute("SELECT id, job_id FROM devices").fetchall()
        moved = [(held.get(r["id"]), r["id"]) for r in stored if held.get(r["id"]) != r["job_id"]]
        if not rows and not moved:
            return
        for kind, ref, reason in rows:
            log.warning("pool store: %s %s set aside: %s", kind, ref, reason)
        with self._tx():
            self.db.executemany(
                "INSERT INTO set_aside VALUES (?,?,?,?) ON CONFLICT (kind, ref) DO NOTHING",
                [(kind, ref, reason, now) for kind, ref, reason in rows],
            )
            self.db.executemany("UPDATE devices SET job_id = ? WHERE id = ?", moved)

    def set_aside(self) -> list[dict[str, Any]]:
        """The rows restarts set aside (kind ``job``, ``project``, ``node`` or ``device``; ref,
        reason, time), for
        ``xirang pool status`` and an operator who repairs or deletes them."""
        rows = self.db.execute("SELECT * FROM set_aside ORDER BY time, kind, ref")
        return [dict(r) for r in rows]

    def _usable(self, parse: Callable[[Any], T], row: Any, kind: str, ref: Any) -> T | None:
        """``parse(row)``, or None for a row the pool cannot use (logged, remembered)."""
        try:
            return parse(row)
        except (ValueError, TypeError, KeyError, PoolError) as exc:
            if (kind, str(ref)) not in self.unusable:
                log.warning("pool store: %s %s is unusable: %s", kind, ref, exc)
            self.unusable[(kind, str(ref))] = str(exc)
            return None

    # --- the read API (for the console and cost metering) -----------------------------------

    def jobs(
        self, project: str | None = None, states: Iterable[str] = (), ids: Iterable[int] = ()
    ) -> list[Job]:
        """Jobs, oldest first, optionally of one project, some states and some ids (cost
        metering reads only the jobs whose usage changed); rows set aside are left out."""
        query = f"SELECT {_JOB_COLUMNS} FROM jobs {_NOT_ASIDE}"
        args: list[Any] = []
        if project:
            query, args = query + " AND project = ?", [*args, project]
        for column, values in (("state", list(states)), ("id", list(ids))):
            if values:
                query += f" AND {column} IN ({','.join('?' * len(values))})"
                args.extend(values)
        rows = self.db.execute(query + " ORDER BY id", args)
        return [job for job in (self._usable(_job, r, "job", r["id"]) for r in rows) if job]

    def nodes(self) -> list[dict[str, Any]]:
        """Every node with its health and how many of its devices are in use."""
        rows = self.db.execute(
            "SELECT n.*, COUNT(d.job_id) AS used FROM nodes n LEFT JOIN devices d "
            f"ON d.node = n.name WHERE n.name NOT IN ({_NODE_ASIDE}) GROUP BY n.name "
            "ORDER BY n.name"
        )
        return [dict(r) for r in rows]

    def devices(self) -> list[dict[str, Any]]:
        """Every device: id, node, type, index on its node and the job holding it (or None)."""
        return [dict(r) for r in self.db.execute(_DEVICES_NOT_ASIDE)]

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
        bucket_s, left = check_bucket(bucket_s), MAX_BUCKETS
        totals: dict[tuple[str, str, float], list[float]] = {}
        for row in self.db.execute(query, args):
            start, end = max(row["start"], since), min(row["end"], until)
            left = _spread(totals, row, start, end, bucket_s, left)
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

    def job_segments(self, job_id: int) -> list[dict[str, Any]]:
        """One job's usage rows, oldest first: what its charge is priced from."""
        sql = "SELECT * FROM usage WHERE job_id = ? ORDER BY start"
        return [dict(r) for r in self.db.execute(sql, (job_id,))]

    def segments(self) -> list[dict[str, Any]]:
        """The raw usage rows, one per stretch a job held devices, oldest first."""
        return [dict(r) for r in self.db.execute("SELECT * FROM usage ORDER BY start, job_id")]

    def events(self, after_seq: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (after_seq, limit)
        )
        return [{**dict(r), "detail": json.loads(r["detail"])} for r in rows]


def _spread(
    totals: dict, row: Mapping[str, Any], start: float, end: float, bucket_s: float, left: int
) -> int:
    """Add one segment's [start, end) to its buckets; returns how many more buckets (beyond
    one per segment) may still be filled. Buckets are counted by index, so any positive size
    ends (stepping a float by a tiny or fractional size may not)."""
    if end <= start:
        return left
    if (end - start) / bucket_s > left + 1:
        raise PoolError(
            f"bucket={bucket_s:g} s splits this range into more than {MAX_BUCKETS} buckets; "
            "use a larger bucket or a shorter since..until range"
        )
    first, last = math.floor(start / bucket_s), math.ceil(end / bucket_s)
    for k in range(first, last):
        lo, hi = max(start, k * bucket_s), min(end, (k + 1) * bucket_s)
        if hi > lo:
            key = (row["project"], row["device_type"], k * bucket_s)
            entry = totals.setdefault(key, [0.0, 0.0])
            entry[0] += row["devices"] * (hi - lo)
            entry[1] += row["cards"] * (hi - lo)
    return left - max(0, last - first - 1)


def check_bucket(bucket_s: Any) -> float:
    """A usage bucket: a finite number of seconds > 0, else one clear error."""
    if isinstance(bucket_s, bool) or not isinstance(bucket_s, int | float):
        raise PoolError(f"bucket must be a number of seconds, got {bucket_s!r}")
    if not math.isfinite(bucket_s) or bucket_s <= 0:
        raise PoolError(f"bucket must be a positive number of seconds, got {bucket_s!r}")
    return float(bucket_s)


def _checked_job(row: Mapping[str, Any]) -> Job:
    """A stored row as a job, every column checked (what a restart takes back); ValueError
    naming the column for a row the pool did not write. Readers after the restart use the
    cheaper :func:`_job`: the rows a restart could not check are set aside by then."""
    for column, kinds in _JOB_TYPES.items():
        value = row[column]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ValueError(f"column {column} holds {value!r}")
    job = _job(row)
    if not all(type(d) is int for d in job.devices):
        raise ValueError(f"column devices holds {row['devices']!r}, not a list of device ids")
    try:
        check_payload(job.payload)
    except PoolError as exc:
        raise ValueError(f"column payload: {exc}") from None
    return job


def _job(row: Mapping[str, Any]) -> Job:
    """A stored row as a job (ValueError, TypeError for one that is not JSON or a state)."""
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


_NUMBER = (int, float)
_OPTIONAL_NUMBER = (int, float, type(None))
#: the type each job column must hold (SQLite stores whatever it is given)
_JOB_TYPES: dict[str, tuple[type, ...]] = {
    "id": (int,),
    "name": (str,),
    "project": (str,),
    "job_class": (str,),
    "cards": (int,),
    "priority": (int,),
    "state": (str,),
    "submitted": _NUMBER,
    "started": _OPTIONAL_NUMBER,
    "finished": _OPTIONAL_NUMBER,
    "attained": _NUMBER,
    "device_type": (str,),
    "devices": (str,),
    "borrowed": (int,),
    "preemptions": (int,),
    "requeues": (int,),
    "payload": (str,),
    "allow_mixing": (int,),
}


#: the type each node column must hold
_NODE_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "type": (str,),
    "devices": (int,),
    "leaf": (str,),
    "spine": (str,),
    "domain_size": (int,),
    "healthy": (int,),
    "drain_reason": (str,),
}


def _node_spec(row: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A stored node row and its device rows as a :class:`Inventory` node spec; ValueError
    naming what is wrong for rows the pool did not write."""
    for column, kinds in _NODE_TYPES.items():
        value = row[column]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ValueError(f"column {column} holds {value!r}")
    if row["devices"] < 1 or row["domain_size"] < 1 or row["healthy"] not in (0, 1):
        raise ValueError("devices and domain_size must be positive, healthy 0 or 1")
    if not devices:
        raise ValueError("no device rows name it")
    first = devices[0]["id"]
    expected = [(first + i, i, row["type"]) for i in range(row["devices"])]
    if [(d["id"], d["idx"], d["type"]) for d in devices] != expected:
        raise ValueError(
            f"its device rows do not match: {row['devices']} devices of type {row['type']} "
            f"with consecutive ids and indices from {first} expected"
        )
    return {
        "name": row["name"],
        "type": row["type"],
        "devices": row["devices"],
        "leaf": row["leaf"],
        "spine": row["spine"],
        "domain_size": row["domain_size"],
        "healthy": bool(row["healthy"]),
        "first_device": first,
    }


def _no_node(row: Mapping[str, Any]) -> None:
    """A device row whose node is not stored: never usable."""
    raise ValueError(f"its node {row['node']!r} is not in the nodes table")


def _project(row: Mapping[str, Any]) -> Project:
    """A stored project row, checked as an operator's edit is."""
    for column in ("guaranteed", "max_priority", "max_jobs", "max_payload_bytes", "burst", "umask"):
        if isinstance(row[column], bool) or not isinstance(row[column], int):
            raise ValueError(f"column {column} holds {row[column]!r}")
    limit = row["borrow_limit"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise ValueError(f"column borrow_limit holds {limit!r}")
    project = Project(
        str(row["name"]),
        row["guaranteed"],
        limit,
        str(row["team"]),
        str(row["token_hash"]),
        parse_priority(row["max_priority"]),
        str(row["run_as"]),
        row["max_jobs"],
        row["max_payload_bytes"],
        row["rate"],
        row["burst"],
        row["umask"],
    )
    return project.check()
