"""The console's data: pool state, views, costs and budgets, cached and filtered per viewer.

:class:`ConsoleSource` reads the pool store at most once per ``ttl`` seconds however many pages
are served (the page stays fast with 10,000 devices and 1,000 jobs), filters what a project may
see, and - each time :meth:`ConsoleSource.sample` runs - meters the pool's allocations into the
cost store and appends the figures to the metrics store the charts are drawn from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from xirang_service.console import view
from xirang_service.console.auth import OPERATOR, whoami
from xirang_service.console.metrics_store import MetricsStore
from xirang_service.console.state import PoolState, read_state
from xirang_service.cost import findings, report
from xirang_service.cost.charges import Charge
from xirang_service.cost.governor import Governor
from xirang_service.cost.meter import Meter
from xirang_service.cost.money import from_micro
from xirang_service.cost.pool_metering import PoolMetering
from xirang_service.cost.store import CostStore
from xirang_service.pool.store import PoolStore

#: how far back the cost pages and /metrics cost series look (``xirang cost report`` any span)
COST_WINDOW_S = 30 * 86400.0
T = TypeVar("T")


@dataclass
class Snapshot:
    """One read of everything, computed once and shared by every request until it expires."""

    taken: float
    state: PoolState
    capacity: dict[str, list[dict[str, Any]]]
    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    quotas: list[dict[str, Any]]
    charges: list[Charge]
    budgets: list[dict[str, Any]] = field(default_factory=list)
    #: what :meth:`ConsoleSource.per_viewer` built from this snapshot, by (what, viewer)
    views: dict[tuple[str, str], Any] = field(default_factory=dict)


class ConsoleSource:
    def __init__(
        self,
        pool: PoolStore,
        costs: CostStore,
        metrics: MetricsStore,
        meter: Meter | None = None,
        operator_token: str = "",
        clock: Callable[[], float] = time.time,
        ttl: float = 2.0,
        reload_operator_token: Callable[[], str] | None = None,
    ) -> None:
        self.pool, self.costs, self.metrics, self.meter = pool, costs, metrics, meter
        self.metering = PoolMetering(meter) if meter is not None else None
        self.operator_token = operator_token
        self.reload_operator_token = reload_operator_token  # a new one ends the old's sessions
        self.clock = clock
        self.ttl = ttl
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()

    # --- reading ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The cached snapshot, re-read when older than ``ttl`` (one reader at a time)."""
        with self._lock:
            now = self.clock()
            if self._snapshot is None or now - self._snapshot.taken >= self.ttl:
                self._snapshot = self._take(now)
            return self._snapshot

    def _take(self, now: float) -> Snapshot:
        if self.reload_operator_token is not None:
            self.operator_token = self.reload_operator_token()
        state = read_state(self.pool, now)
        budgets = [
            {
                "scope": s.budget.scope,
                "name": s.budget.name,
                "limit": str(from_micro(s.budget.limit_micro)),
                "spent": str(from_micro(s.spent_micro)),
                "used": round(s.fraction, 4),
                "state": s.state,
                "action": s.budget.action,
            }
            for s in Governor(self.costs).statuses()
        ]
        return Snapshot(
            taken=now,
            state=state,
            capacity=view.capacity(state),
            nodes=view.nodes(state),
            jobs=view.jobs(state, now),
            quotas=view.quotas(state),
            charges=self.costs.charges(since=now - COST_WINDOW_S),
            budgets=budgets,
        )

    def whoami(self, token: str) -> str:
        return whoami(token, self.snapshot().state.projects, self.operator_token)

    # --- per viewer -------------------------------------------------------------------------

    def jobs_for(self, who: str) -> list[dict[str, Any]]:
        return _mine(self.snapshot().jobs, who)

    def job_history(self, who: str, job_id: int) -> dict[str, Any] | None:
        """Job ``job_id``'s history (:mod:`xirang_service.pool.history`), read from the pool's
        store now (not the snapshot, which holds only live jobs); None for a job unknown or,
        for a project's viewer, another project's."""
        from xirang_service.pool.history import job_history

        with self._lock:
            found = job_history(self.pool, job_id, self.costs)
        return found if found is not None and who in (OPERATOR, found["project"]) else None

    def stragglers(self) -> list[dict[str, Any]]:
        """Running jobs' straggler ranks (:func:`view.stragglers`), read once per snapshot."""
        return self.per_viewer(
            "stragglers", OPERATOR, lambda: view.stragglers(self.snapshot().state)
        )

    def quotas_for(self, who: str) -> list[dict[str, Any]]:
        return _mine(self.snapshot().quotas, who)

    def charges_for(self, who: str) -> list[Charge]:
        charges = self.snapshot().charges
        return charges if who == OPERATOR else [c for c in charges if c.project == who]

    def budgets_for(self, who: str) -> list[dict[str, Any]]:
        budgets = self.snapshot().budgets
        if who == OPERATOR:
            return budgets
        mine = {c.ref.partition("@")[0] for c in self.charges_for(who)}  # pool job id or run
        return [
            b
            for b in budgets
            if (b["scope"], b["name"]) == ("project", who)
            or (b["scope"] == "job" and b["name"] in mine)
        ]

    def per_viewer(self, what: str, who: str, build: Callable[[], T]) -> T:
        """``build()`` once per snapshot and viewer, then its result until the snapshot expires.

        For answers that are a pure function of the snapshot and the viewer but cost more than
        the HTTP round trip: grouping 2,500 charges took 7 ms of each ``/cost`` request, the
        metrics exposition 5 ms of each scrape, every time. A race builds twice, harmlessly."""
        views = self.snapshot().views
        key = (what, who)
        if key not in views:
            views[key] = build()
        return views[key]

    def cost_view(self, who: str) -> dict[str, Any]:
        """Cost by team, project and device type, budgets and findings, for one viewer."""
        return self.per_viewer("cost", who, lambda: self._cost_view(who))

    def _cost_view(self, who: str) -> dict[str, Any]:
        charges = self.charges_for(who)
        return {
            "by": {by: _report_rows(report.group(charges, by)) for by in report.GROUPINGS},
            "budgets": self.budgets_for(who),
            "findings": [_finding_row(f) for f in findings.find(charges)],
        }

    # --- sampling ---------------------------------------------------------------------------

    def sample(self) -> None:
        """Meter the pool's allocations (when a price book is set) and record one set of
        metrics; the console's sampler thread calls this every interval."""
        now = self.clock()
        if self.metering is not None:
            self.costs.record(self.metering.charges(self.pool, now))
        state = read_state(self.pool, now)
        capacity = view.capacity(state)
        samples: list[tuple[str, str, float]] = []
        for row in capacity["types"]:
            samples.append(("water_level", row["device_type"], row["water_level"]))
            samples.append(("allocated", row["device_type"], row["allocated"]))
        live = view.jobs(state, now)
        samples.append(("queue_length", "all", sum(1 for j in live if j["state"] == "queued")))
        samples.append(("running_jobs", "all", sum(1 for j in live if j["state"] == "running")))
        for team in report.group(self.costs.charges(), "team").rows:
            samples.append(("cost_total", team.key, float(from_micro(team.amount_micro))))
        self.metrics.record(now, samples)
        with self._lock:
            self._snapshot = None


def _mine(rows: list[dict[str, Any]], who: str) -> list[dict[str, Any]]:
    return rows if who == OPERATOR else [r for r in rows if r["project"] == who]


def _report_rows(rep: report.Report) -> dict[str, Any]:
    def row(r: report.Row) -> dict[str, Any]:
        return {
            "key": r.key,
            "amount": str(from_micro(r.amount_micro)),
            "idle": str(from_micro(r.idle_micro)),
            "amount_micro": r.amount_micro,
            "device_hours": round(r.device_s / 3600, 4),
            "energy_kwh": round(r.energy_wh / 1000, 4),
            "tokens_per_cost": r.tokens_per_cost,
        }

    return {"currency": rep.currency, "rows": [row(r) for r in rep.rows], "total": row(rep.total)}


def _finding_row(f: findings.Finding) -> dict[str, Any]:
    return {**f.__dict__, "cost": str(from_micro(f.cost_micro))}
