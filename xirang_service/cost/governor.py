"""Budgets applied: the governor admits, demotes and stops pool jobs by what the cost store has
metered, and :class:`PoolBudgets` is what the pool service asks of it (meter its own usage with a
price book, admit new jobs, name the jobs a budget stops). The budget records themselves live in
:mod:`xirang_service.cost.budgets`, below the store that keeps them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xirang_service.cost.budgets import LOWEST_PRIORITY, BudgetStatus
from xirang_service.cost.errors import BudgetExceeded, CostError
from xirang_service.cost.money import from_micro
from xirang_service.cost.store import CostStore

if TYPE_CHECKING:
    from xirang_service.cost.meter import Meter
    from xirang_service.cost.pool_metering import PoolMetering
    from xirang_service.cost.preferences import CostPreferences
    from xirang_service.cost.pricebook import PriceBook
    from xirang_service.pool.store import PoolStore


class Governor:
    """Applies budgets to pool requests, from what the cost store has metered."""

    def __init__(self, store: CostStore) -> None:
        self.store = store

    def statuses(self) -> list[BudgetStatus]:
        spent = self.store.spent_micro
        return [BudgetStatus(b, spent(b.scope, b.name)) for b in self.store.budgets()]

    def status(self, scope: str, name: str) -> BudgetStatus | None:
        budget = self.store.budget(scope, name)
        return BudgetStatus(budget, self.store.spent_micro(scope, name)) if budget else None

    def admit(self, project: str, priority: int) -> int:
        """The priority a new job of ``project`` may be queued at; raises when refused."""
        status = self.status("project", project)
        if status is None or status.action is None:
            return priority
        if status.action == "lower_priority":
            return LOWEST_PRIORITY
        raise BudgetExceeded(
            f"project '{project}' spent {status.fraction:.0%} of its budget "
            f"(action {status.action}): new jobs are refused until the budget is raised with "
            f"`xirang cost budget set project {project} <amount>`"
        )

    def demote_reason(self, project: str, priority: int) -> str | None:
        """Why a queued job of ``project`` at ``priority`` must drop to the lowest class (its
        project's ``lower_priority`` budget is spent), else None."""
        status = self.status("project", project)
        if status is None or status.action != "lower_priority" or priority <= LOWEST_PRIORITY:
            return None
        return f"project '{project}' spent {status.fraction:.0%} of its budget (lower_priority)"

    def stop_reason(self, project: str, job_ref: str) -> str | None:
        """Why a job must checkpoint and stop (its own budget or its project's), else None;
        the pool writes the reason into the job's event history."""
        for status in (self.status("job", job_ref), self.status("project", project)):
            if status is not None and status.action == "checkpoint_stop":
                budget = status.budget
                return (
                    f"{budget.scope} '{budget.name}' spent {status.fraction:.0%} of its budget "
                    f"(action checkpoint_stop)"
                )
        return None

    def should_stop(self, project: str, job_ref: str) -> bool:
        """Whether a running job must checkpoint and stop (its own or its project's budget)."""
        return self.stop_reason(project, job_ref) is not None

    def jobs_to_stop(self, running: Iterable[Any]) -> list[Any]:
        """The running pool jobs (with ``id`` and ``project``) a budget tells to stop; the pool
        stops them the way it preempts, so each saves a checkpoint first."""
        return [job for job in running if self.should_stop(job.project, str(job.id))]


class PoolBudgets:
    """What the pool service asks of cost governance: meter its own usage into the cost store
    (only with a price book), admit new jobs, and name the jobs a budget stops.

    Without a price book the pool cannot price its jobs, so budgets act only on charges others
    record (runs' observers, ``xirang console --prices``); :attr:`metered` says which it is, and
    ``xirang pool serve`` prints it at start so the gap is never silent.
    """

    def __init__(
        self,
        governor: Governor,
        meter: Meter | None = None,
        preferences: CostPreferences | None = None,
    ) -> None:
        self.governor = governor
        self.meter = meter
        self.preferences = preferences
        self._metering: PoolMetering | None = None

    @classmethod
    def open(
        cls,
        book: PriceBook | None = None,
        cost_db: str | Path | None = None,
        preferences: CostPreferences | None = None,
    ) -> PoolBudgets:
        """Budgets over the cost store at ``cost_db`` (default ``XIRANG_HOME/cost/cost.db``);
        with a book, the pool meters its jobs and its scheduler consults the book's placement
        preferences (``preferences``, else the book's own without deadlines)."""
        from xirang_service.cost.meter import Meter
        from xirang_service.cost.preferences import CostPreferences

        if book is None:
            return cls(Governor(CostStore(cost_db)))
        return cls(Governor(CostStore(cost_db)), Meter(book), preferences or CostPreferences(book))

    @classmethod
    def from_file(cls, prices: str | Path | None, cost_db: str | Path | None = None) -> PoolBudgets:
        """What ``xirang pool serve --prices FILE --cost-db DB`` runs with (no file: no
        metering, no preferences)."""
        if not prices:
            return cls.open(None, cost_db)
        from xirang_service.cost.pricefile import load_preferences

        preferences = load_preferences(prices)
        return cls.open(preferences.book, cost_db, preferences)

    @property
    def metered(self) -> bool:
        return self.meter is not None

    def check_types(self, device_types: Iterable[str]) -> None:
        """Fail at start, not on a later tick, when the price book misses a pool device type."""
        if self.meter is None:
            return
        missing = sorted(set(device_types) - set(self.meter.book.prices))
        if missing:
            priced = ", ".join(sorted(self.meter.book.prices)) or "none"
            raise CostError(
                f"the price book has no price for device type(s) {', '.join(missing)} of this "
                f"pool (priced: {priced}); add them under 'prices:'"
            )

    def record(self, state: Any, now: float) -> int:
        """Meter every allocation of the pool state up to ``now`` (re-metering replaces)."""
        if self.meter is None:
            return 0
        return self.governor.store.record(self.meter.pool_charges(state, now))

    def job_charge(self, state: Any, job_id: int, now: float) -> dict[str, Any] | None:
        """What the pool charges job ``job_id`` up to ``now``: every allocation it held
        (placements, resumed ones too), priced by the same meter that fills the cost store, so
        the run's summary can state the very amount ``xirang cost report`` shows. None when
        the pool does not meter (no price book)."""
        if self.meter is None:
            return None
        mine = dataclasses.replace(
            state,
            jobs=[j for j in state.jobs if j.id == job_id],
            segments=[s for s in state.segments if s["job_id"] == job_id],
        )
        charges = self.meter.pool_charges(mine, now)
        by_type: dict[str, dict[str, float]] = {}
        for c in charges:  # a mixed placement's devices are charged at their own type's price
            part = by_type.setdefault(c.device_type, {"amount_micro": 0, "device_s": 0.0})
            part["amount_micro"] += c.amount_micro
            part["device_s"] += c.device_s
        return {
            "amount": float(from_micro(sum(c.amount_micro for c in charges))),
            "currency": self.meter.book.currency,
            "policy": "pool",
            "device_s": round(sum(c.device_s for c in charges), 3),
            "by_type": {
                t: {"amount": float(from_micro(int(p["amount_micro"]))), "device_s": p["device_s"]}
                for t, p in sorted(by_type.items())
            },
        }

    def meter_pool(self, store: PoolStore, now: float) -> int:
        """Meter what changed in the pool's store since the last tick (the service's tick)."""
        if self.meter is None:
            return 0
        from xirang_service.cost.pool_metering import PoolMetering

        if self._metering is None or self._metering.meter is not self.meter:
            self._metering = PoolMetering(self.meter)
        return self.governor.store.record(self._metering.charges(store, now))

    def admit(self, project: str, priority: int) -> int:
        return self.governor.admit(project, priority)

    def to_demote(self, queued: Iterable[Any]) -> list[tuple[Any, int, str]]:
        """The queued jobs a ``lower_priority`` budget demotes: (job, new priority, reason)."""
        reasons = ((job, self.governor.demote_reason(job.project, job.priority)) for job in queued)
        return [(job, LOWEST_PRIORITY, reason) for job, reason in reasons if reason]

    def to_stop(self, jobs: Iterable[Any]) -> list[tuple[Any, str]]:
        """The jobs (running or queued) a budget ends, each with the reason."""
        reasons = ((job, self.governor.stop_reason(job.project, str(job.id))) for job in jobs)
        return [(job, reason) for job, reason in reasons if reason]

    def close(self) -> None:
        self.governor.store.close()
