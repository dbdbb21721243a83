"""Priority with quotas and borrowing (the default policy), least attained service in a class.

Order: priority class first; inside a class the job with the least attained service (card-hours
already received, discretised into levels as Tiresias does) goes first, then arrival. Nobody has
to predict durations: a long job sinks to a lower level as it runs, so short jobs are not stuck
behind it. Preemption only ever takes borrowed capacity or a project's own lower-ranked work:

- reclaim: a job that fits in its project's unused guarantee preempts other projects' borrowed
  jobs (Kueue ``reclaimWithinCohort``);
- rank: a job of a higher priority, or of the same priority and a lower service level, preempts
  a worse-ranked borrowed job, or a worse-ranked job of its own project when it then fits in
  the project's guarantee (Kueue ``withinClusterQueue``); a preemption by service level waits
  until the victim ran ``preempt_grace_s`` (so jobs make progress between preemptions).

A job inside another project's guaranteed share is never preempted by that rule set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from xirang.pool import Policy

if TYPE_CHECKING:
    from xirang.pool import Job, PoolView


class PriorityQuota(Policy):
    name: ClassVar[str] = "priority"
    preempts: ClassVar[bool] = True

    def __init__(
        self, las_thresholds: tuple[float, ...] = (1.0, 8.0), preempt_grace_s: float = 600.0
    ) -> None:
        super().__init__(tuple(las_thresholds), preempt_grace_s)

    def rank(self, job: Job, level: int) -> tuple[Any, ...]:
        return (-job.priority, level, job.submitted, job.id)

    def may_preempt(self, waiting: Job, victim: Job, engine: PoolView, now: float) -> bool:
        # asked for up to max_victims candidates per try: the cheap tests come first
        lender = victim.project != waiting.project
        if victim.borrowed and lender and engine.quotas.within_guarantee(waiting):
            return True  # the lender takes its guaranteed share back
        if not victim.borrowed and not self._fits_after(waiting, victim, engine):
            return False  # a guaranteed job makes room only for its own project's guarantee
        if victim.priority != waiting.priority:
            return victim.priority < waiting.priority
        ran = now - (victim.started if victim.started is not None else now)
        worse = self.level(victim.attained_at(now)) > self.level(waiting.attained_at(now))
        return worse and ran >= self.preempt_grace_s

    @staticmethod
    def _fits_after(waiting: Job, victim: Job, engine: PoolView) -> bool:
        """Whether ``waiting`` fits in its project's guarantee once ``victim`` (same project,
        inside the guarantee) is gone: Kueue's ``withinClusterQueue``. Freeing guaranteed
        capacity for a job that would only borrow it would let the two chase each other."""
        if victim.project != waiting.project:
            return False
        quotas = engine.quotas
        guarantee = quotas.projects[waiting.project].guaranteed
        return quotas.guaranteed_in_use(waiting.project) - victim.cards + waiting.cards <= guarantee
