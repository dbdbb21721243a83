"""What the consistency tests share: a store whose Nth write fails (a real database that is
told to refuse one statement, inside its real transaction) and the comparison of the service's
memory with a fresh load of its store."""

from __future__ import annotations

import copy
from typing import Any

from xirang_service.pool.cluster import Inventory
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.service import PoolService, describe

WRITES = ("INSERT", "UPDATE", "DELETE")


class InjectedFailure(Exception):
    """The write a test told the store to refuse (as a full disk or a lost server would)."""


class FailingDatabase:
    """A store's database that refuses its ``fail_in``-th write from now (0: none)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.fail_in = 0

    def _write(self, sql: str) -> None:
        if self.fail_in and sql.lstrip().upper().startswith(WRITES):
            self.fail_in -= 1
            if self.fail_in == 0:
                raise InjectedFailure(f"injected failure of: {sql[:40]}")

    def execute(self, sql: str, args: Any = ()) -> Any:
        self._write(sql)
        return self.db.execute(sql, args)

    def executemany(self, sql: str, rows: Any) -> None:
        self._write(sql)
        self.db.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def failing(service: PoolService) -> FailingDatabase:
    """Put a :class:`FailingDatabase` under ``service``'s store; returns it (to arm)."""
    db = FailingDatabase(service.store.db)
    service.store.db = db
    return db


def snapshot(engine: PoolEngine) -> dict[str, Any]:
    """What the pool holds in memory: jobs, queue order, who runs, free devices, health and
    quota use, the projects."""
    quotas = engine.quotas
    return copy.deepcopy(
        {
            "jobs": {i: {**describe(j), "attained": j.attained} for i, j in engine.jobs.items()},
            "queue": [i for _, i in engine.queue],
            "running": sorted(i for _, i in engine.running),
            "free": dict(engine.cluster.type_free),
            "healthy": {n.name: n.healthy for n in engine.cluster.nodes},
            "used": {p: n for p, n in quotas.used.items() if n},
            "borrowed": {p: n for p, n in quotas.borrowed.items() if n},
            "projects": {name: vars(p) for name, p in quotas.projects.items()},
            "next_id": engine.next_id,
        }
    )  # a copy: a job's payload is one dict that a later request may change


def fresh(service: PoolService) -> PoolEngine:
    """The engine a restart would build from ``service``'s store now."""
    engine = PoolEngine(
        Inventory(service.store.cluster_nodes()),
        service.throughputs,
        service.policy,
        preferences=service.budgets.preferences,
    )
    service.store.load_into(engine, service.clock())
    return engine


def assert_consistent(service: PoolService) -> None:
    """Memory equals a fresh load of the store, and the store's devices table names the
    jobs memory has on them."""
    assert snapshot(service.engine) == snapshot(fresh(service))
    held = {d: j.id for j in service.engine.running_jobs() for d in j.devices}
    stored = {d["id"]: d["job_id"] for d in service.store.devices() if d["job_id"] is not None}
    assert stored == held
