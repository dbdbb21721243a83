"""Gavel's heterogeneity-aware max-min fairness (Narayanan et al., OSDI 2020, section 4.1).

Gavel computes an allocation ``X``: for every job ``m`` and device type ``j`` the fraction of
time the job should spend on that type, so that the least-served job's *normalised* throughput
(its throughput under ``X`` over what it would get from an equal, type-blind share of the
cluster) is as high as it can be, given each type's devices. Its round-based mechanism then
runs, on each type, the jobs furthest behind their allocation. The objective is least attained
service (LAS) made heterogeneity-aware: equal weights, no priorities.

Here the same linear program is solved over the pool's model, where a job of ``c`` cards on a
type takes ``devices_for(c)`` devices of it (more slow devices, fewer fast ones) and runs at
those devices' speed; jobs of one job class and size are interchangeable, so the program has
one row per (class, cards) group weighted by its number of active jobs, which gives every
job of a group the same allocation (the program is convex, so averaging any optimum over a
group's jobs is still optimal). A second program keeps the max-min value and maximises the
total normalised throughput, so capacity the least-served group cannot use goes to the others
(the Pareto step Gavel's water-filling variant takes, in one pass).

The engine has no time slices: a gang keeps its devices until it ends or is preempted. The
allocation therefore orders each group's device types (largest share first; the pool places a
job on the first with room), and LAS orders the queue: attained service in card-hours,
discretised into ``las_thresholds`` levels, with a job of a lower level preempting one of a
higher level that ran for at least a round (``preempt_grace_s``, Gavel's 6-minute round).
Gavel solves again on every arrival and completion; here the program is solved again when a
group is first seen or the number of active jobs moved by ``resolve_share`` of them (and by
at least ``resolve_min``) since the last solve, which bounds the solver's cost on an 82k-job
trace; a group that left keeps its last order until a solve sees it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from xirang.pool import Policy, PoolError

if TYPE_CHECKING:
    from xirang.pool import Job, PoolView

#: a (job class, cards) group: the jobs the program cannot tell apart
Group = tuple[str, int]
#: solved orders kept before the cache starts over (each is a few groups' type lists)
SOLVED_KEPT = 4096


class MaxMinFairness(Policy):
    name: ClassVar[str] = "gavel"
    preempts: ClassVar[bool] = True
    rank_depth: ClassVar[int] = 1  # a victim must be at a strictly higher LAS level

    def __init__(
        self,
        las_thresholds: tuple[float, ...] = (1.0, 8.0),
        preempt_grace_s: float = 360.0,
        resolve_share: float = 0.1,
        resolve_min: int = 16,
    ) -> None:
        super().__init__(tuple(las_thresholds), preempt_grace_s)
        self.resolve_share, self.resolve_min = resolve_share, resolve_min
        self._solved_at = -1  # active jobs at the last solve
        self._order: dict[Group, list[str]] = {}
        #: orders already solved, by the active groups' counts (a quiet pool repeats them)
        self._solved: dict[tuple[tuple[Group, int], ...], dict[Group, list[str]]] = {}

    def rank(self, job: Job, level: int) -> tuple[Any, ...]:
        """Least attained service first (no priority classes: every job weighs the same)."""
        return (level, job.submitted, job.id)

    def device_types(self, job: Job, engine: PoolView) -> list[str]:
        """The group's eligible types, the largest share of its allocation first."""
        group = (job.job_class, job.cards)
        active = len(engine.queue) + len(engine.running)
        moved = abs(active - self._solved_at)
        if group not in self._order or moved >= max(self.resolve_share * active, self.resolve_min):
            self._order.update(self._allocate(engine, group))  # a group gone keeps its last
            self._solved_at = active
        types = self._order[group]
        if engine.preferences is not None:
            types = engine.preferences.order_types(job.job_class, types, engine.throughputs)
        return types

    def may_preempt(self, waiting: Job, victim: Job, engine: PoolView, now: float) -> bool:
        """A job less served (a lower LAS level) takes a job's devices after its round."""
        ran = now - (victim.started if victim.started is not None else now)
        lower = self.level(waiting.attained_at(now)) < self.level(victim.attained_at(now))
        return lower and ran >= self.preempt_grace_s

    def _allocate(self, engine: PoolView, extra: Group) -> dict[Group, list[str]]:
        """Each active group's types ordered by the max-min allocation (``extra``, the group
        asking now, counted as one job when no active job is of it)."""
        counts: dict[Group, int] = {}
        queued = (engine.jobs[entry[-1]] for entry in engine.queue)
        for job in (*queued, *engine.running_jobs()):
            group = (job.job_class, job.cards)
            counts[group] = counts.get(group, 0) + 1
        counts.setdefault(extra, 1)
        key = tuple(sorted(counts.items()))
        if key not in self._solved:
            if len(self._solved) >= SOLVED_KEPT:
                self._solved.clear()
            shares = allocation(engine, counts)
            speed = engine.throughputs.relative
            self._solved[key] = {g: _ordered(row, g, speed) for g, row in shares.items()}
        return self._solved[key]


def _ordered(row: dict[str, float], group: Group, speed: Callable[[str, str], float]) -> list[str]:
    """A group's types, the largest share first; equal shares, the faster type first."""
    return sorted(row, key=lambda t: (-row[t], -speed(group[0], t), t))


def allocation(engine: PoolView, counts: dict[Group, int]) -> dict[Group, dict[str, float]]:
    """Gavel's max-min fair allocation: per group, the time fraction on each eligible type."""
    try:
        import numpy as np
        from scipy.optimize import linprog
    except ImportError as missing:  # scipy comes with the xirang[pool] extra
        raise PoolError(
            f"pool policy gavel needs scipy ({missing}): pip install 'xirang[pool]'"
        ) from None
    cards, cluster = engine.throughputs, engine.cluster
    capacity = {t: cluster.capacity(t) for t in cluster.types}
    total = sum(capacity.values()) or 1
    groups = list(counts)
    cells = [
        (g, t, need)
        for g in groups
        for t in cluster.types
        if capacity[t] and (need := cards.devices_for(g[0], g[1], t))
    ]
    if not cells:
        return {g: {} for g in groups}
    rate = np.array([need * cards.relative(g[0], t) for g, t, need in cells])
    # normalised by the rate an equal, type-blind share of the cluster would give the group
    fair = {g: 0.0 for g in groups}
    for (g, t, _), r in zip(cells, rate, strict=True):
        fair[g] += r * capacity[t] / total
    n, rows = len(cells), len(groups)
    index = {g: i for i, g in enumerate(groups)}
    spread = np.zeros((rows, n))  # a group's normalised throughput, and its time fractions
    time = np.zeros((rows, n))
    for k, (g, _, _) in enumerate(cells):
        spread[index[g], k] = rate[k] / fair[g]
        time[index[g], k] = 1.0
    types = [t for t in cluster.types if capacity[t]]
    devices = np.zeros((len(types), n))
    for k, (g, t, need) in enumerate(cells):
        devices[types.index(t), k] = counts[g] * need
    bound = np.array([capacity[t] for t in types], dtype=float)
    # variables: the n time fractions, then the least normalised throughput
    a_ub = np.block(
        [
            [-spread, np.ones((rows, 1))],
            [time, np.zeros((rows, 1))],
            [devices, np.zeros((len(types), 1))],
        ]
    )
    b_ub = np.concatenate([np.zeros(rows), np.ones(rows), bound])
    first = linprog(np.r_[np.zeros(n), -1.0], A_ub=a_ub, b_ub=b_ub, method="highs")
    least = -first.fun if first.success else 0.0
    weights = np.array([counts[g] for g, _, _ in cells]) * spread.sum(axis=0)
    bounds = [(0, None)] * n + [(least * (1 - 1e-6), None)]
    second = linprog(np.r_[-weights, 0.0], A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    x = (second if second.success else first).x
    shares: dict[Group, dict[str, float]] = {g: {} for g in groups}
    for k, (g, t, _) in enumerate(cells):
        shares[g][t] = float(x[k]) if x is not None else 0.0
    return shares
