"""Budgets per project and per job: a warning at a threshold, an action at the limit.

The actions are what an operator can ask of the pool once money runs out:

* ``stop_submissions`` - new jobs of the project are refused (running ones continue);
* ``lower_priority`` - new and queued jobs drop to the lowest priority class, so they run only
  on capacity nobody else wants;
* ``checkpoint_stop`` - a running job is asked to save a checkpoint and stop (the pool's
  ``preempted`` path), and nothing new starts.

These are the records the cost store keeps; :mod:`xirang_service.cost.governor` enforces them
(the pool service consults it before admitting a job, and on each tick meters its usage and
stops the jobs a budget ends). The console shows each status.
"""

from __future__ import annotations

from dataclasses import dataclass

from xirang_service.cost.errors import CostError

ACTIONS = ("stop_submissions", "lower_priority", "checkpoint_stop")
SCOPES = ("project", "job")
LOWEST_PRIORITY = 0


@dataclass(frozen=True)
class Budget:
    """A limit in micro-units for one project or one job ref; ``warn_at`` is a fraction."""

    scope: str
    name: str
    limit_micro: int
    warn_at: float = 0.8
    action: str = "stop_submissions"

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise CostError(f"budget scope '{self.scope}' is unknown; valid: {', '.join(SCOPES)}")
        if self.action not in ACTIONS:
            valid = ", ".join(ACTIONS)
            raise CostError(f"budget action '{self.action}' is unknown; valid: {valid}")
        if self.limit_micro <= 0:
            raise CostError(f"budget for {self.scope} '{self.name}': the limit must be > 0")
        if not 0 < self.warn_at <= 1:
            raise CostError(f"budget warn_at={self.warn_at}: use a fraction in (0, 1]")


@dataclass(frozen=True)
class BudgetStatus:
    """Where spending stands against a budget: ``ok``, ``warn`` or ``limit``."""

    budget: Budget
    spent_micro: int

    @property
    def fraction(self) -> float:
        return self.spent_micro / self.budget.limit_micro

    @property
    def state(self) -> str:
        if self.spent_micro >= self.budget.limit_micro:
            return "limit"
        return "warn" if self.fraction >= self.budget.warn_at else "ok"

    @property
    def action(self) -> str | None:
        """The limit action in force, or None while under the limit."""
        return self.budget.action if self.state == "limit" else None
