"""The cost store: charges and budgets in one SQLite file under ``XIRANG_HOME/cost/``.

Charges are keyed by ``(source, ref)`` so metering the same job twice (the meter runs again, a
run's observer fires after a restart) replaces the charge instead of billing twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

from xirang_core.paths import private_file, xirang_home
from xirang_core.train.cost import pending_charges
from xirang_service.cost.budgets import Budget
from xirang_service.cost.charges import Charge
from xirang_service.cost.meter import run_charge

_CHARGE_FIELDS = [f.name for f in fields(Charge)]
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS charges (
    {", ".join(_CHARGE_FIELDS)},
    PRIMARY KEY (source, ref)
);
CREATE INDEX IF NOT EXISTS charges_start ON charges (start);
CREATE TABLE IF NOT EXISTS budgets (
    scope TEXT, name TEXT, limit_micro INTEGER, warn_at REAL, action TEXT,
    PRIMARY KEY (scope, name)
);
"""


def default_path() -> Path:
    return xirang_home() / "cost" / "cost.db"


class CostStore:
    """Thread-safe access to the cost database (one connection, serialised)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = private_file(path or default_path())
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        self._lock = threading.Lock()
        with self._tx() as db:
            db.executescript(_SCHEMA)
        if Path(self.path).resolve() == default_path().resolve():  # the store runs charge
            self._take_pending()

    def _take_pending(self) -> None:
        """Record the charges finished runs left (:func:`~xirang_core.train.cost.
        pending_charges`), then remove their files. A run reported twice, or taken by two
        stores at once, is one charge: a charge replaces the one with its source and ref."""
        folder = pending_charges()
        for file in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                left = json.loads(file.read_text())
            except FileNotFoundError:  # another store took it first
                continue
            charge = run_charge(
                left["summary"], left["config"], left["end"], left["watts"], left["amount"]
            )
            self.record([charge])
            file.unlink(missing_ok=True)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._db:
            yield self._db

    def close(self) -> None:
        self._db.close()

    # --- charges ----------------------------------------------------------------------------

    def record(self, charges: Iterable[Charge]) -> int:
        """Insert or replace charges; returns how many were written."""
        rows = [tuple(getattr(c, f) for f in _CHARGE_FIELDS) for c in charges]
        marks = ", ".join("?" * len(_CHARGE_FIELDS))
        with self._tx() as db:
            db.executemany(f"INSERT OR REPLACE INTO charges VALUES ({marks})", rows)
        return len(rows)

    def charges(
        self, since: float | None = None, until: float | None = None, project: str | None = None
    ) -> list[Charge]:
        """Charges whose allocation started in ``[since, until)``, optionally one project's."""
        sql, args = "SELECT * FROM charges WHERE 1=1", []
        filters = (("start >= ?", since), ("start < ?", until), ("project = ?", project))
        for clause, value in filters:
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        with self._tx() as db:
            rows = db.execute(sql + " ORDER BY start, source, ref", args).fetchall()
        return [Charge(*row) for row in rows]

    def pool_job_amounts(self, job_id: int | None = None) -> dict[int, tuple[int, str]]:
        """What the pool's metering charged each pool job (or job ``job_id``), summed over its
        placements (refs ``<job>@<start>``): micro-units and currency, for ``xirang pool jobs``
        and ``history``."""
        sql = "SELECT ref, amount_micro, currency FROM charges WHERE source = 'pool'"
        args: list[str] = []
        if job_id is not None:
            sql, args = sql + " AND ref LIKE ?", [f"{job_id}@%"]
        with self._tx() as db:
            rows = db.execute(sql, args).fetchall()
        amounts: dict[int, tuple[int, str]] = {}
        for ref, micro, currency in rows:
            job = int(ref.split("@", 1)[0])
            amounts[job] = (amounts.get(job, (0, currency))[0] + micro, currency)
        return amounts

    def totals(self, project: str | None = None) -> list[tuple[str, str, str, str, int, int]]:
        """All-time ``(team, project, device_type, currency, amount_micro, idle_micro)`` sums:
        what Prometheus counters need, since no charge ever leaves them (a window's sums
        shrink as charges age out of it)."""
        sql = (
            "SELECT team, project, device_type, currency, SUM(amount_micro), SUM(idle_micro) "
            "FROM charges"
        )
        where, args = (" WHERE project = ?", (project,)) if project is not None else ("", ())
        group = " GROUP BY team, project, device_type, currency ORDER BY 1, 2, 3, 4"
        with self._tx() as db:
            rows = db.execute(sql + where + group, args).fetchall()
        return [(t, p, d, c, int(a), int(i)) for t, p, d, c, a, i in rows]

    def spent_micro(self, scope: str, name: str) -> int:
        """Everything charged so far to a project (``scope='project'``) or one job: a run's
        directory, or a pool job id, whose allocations are charged as ``<id>@<start>``."""
        args: tuple[str, ...]
        if scope == "project":
            where, args = "project = ?", (name,)
        else:
            where, args = "ref = ? OR ref LIKE ?", (name, f"{name}@%")
        with self._tx() as db:
            sql = f"SELECT COALESCE(SUM(amount_micro), 0) FROM charges WHERE {where}"
            row = db.execute(sql, args).fetchone()
        return int(row[0])

    # --- budgets ----------------------------------------------------------------------------

    def set_budget(self, budget: Budget) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?, ?)",
                (budget.scope, budget.name, budget.limit_micro, budget.warn_at, budget.action),
            )

    def budgets(self) -> list[Budget]:
        with self._tx() as db:
            rows = db.execute("SELECT * FROM budgets ORDER BY scope, name").fetchall()
        return [Budget(*row) for row in rows]

    def budget(self, scope: str, name: str) -> Budget | None:
        return next((b for b in self.budgets() if (b.scope, b.name) == (scope, name)), None)
