"""Scheduling policies: the plug-in point of the pool.

A policy decides four things and nothing else: the order of the queue (:meth:`Policy.rank`),
which device types a job may take and in which preference (:meth:`Policy.device_types`), which
of them it may start on now (:meth:`Policy.startable`: all, unless capacity is held for another
job), and which running job a waiting job may preempt (:meth:`Policy.may_preempt`). The engine
does the rest (quota accounting, gang placement, requeues), identically for the service and the
simulator. Policies are registered through the ``xirang_pool_policies`` hook as
:class:`~xirang_core.specs.PolicySpec` entries; :func:`load_policy` finds them. A policy
registered the old way, a :class:`PoolPolicySpec` scheduler named ``pool-<policy>``, still
loads for one release, with a ``DeprecationWarning``.

A pool started with a price book also has :class:`Preferences` (cost governance's, see
:mod:`xirang_service.cost.preferences`): every policy's device-type order passes through them, and
the engine asks them which jobs wait for a cheaper window or a deadline and which running jobs
to reclaim first.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from xirang_core.specs import SchedulerSpec
from xirang_service.pool.errors import PoolError

if TYPE_CHECKING:
    from xirang_service.pool.cards import Throughputs
    from xirang_service.pool.cluster import Inventory
    from xirang_service.pool.jobs import Job
    from xirang_service.pool.quota import QuotaBook

#: the old registration's scheduler names of pool policies start with this
POLICY_PREFIX = "pool-"


@dataclass(frozen=True)
class PoolPolicySpec(SchedulerSpec):
    """Deprecated: a pool policy registered through ``xirang_schedulers`` as
    ``pool-<policy>``; :class:`~xirang_core.specs.PolicySpec` through ``xirang_pool_policies``
    is its kind now."""


class Preferences(Protocol):
    """Placement preferences a scheduling pass consults (when and where work is cheapest)."""

    def order_types(self, job_class: str, types: list[str], throughputs: Throughputs) -> list[str]:
        """``types`` (the policy's order) in the order the preferences favour."""

    def hold(self, job: Job, now: float) -> str | None:
        """Why ``job`` should not run now (e.g. it waits for a cheap window), else None."""

    def reclaim(self, running: Iterable[Job], now: float) -> list[tuple[Job, str]]:
        """Running jobs to stop now (they checkpoint and requeue), each with the reason."""

    def wake_at(self, now: float) -> float | None:
        """The next moment :meth:`hold` or :meth:`reclaim` may answer differently."""


class PoolView(Protocol):
    """What a policy reads of the pool engine that consults it. The engine satisfies it, so
    policies (and third-party ones) depend on this contract, never on the engine module."""

    cluster: Inventory
    throughputs: Throughputs
    quotas: QuotaBook
    preferences: Preferences | None
    jobs: dict[int, Job]
    queue: Any  # sorted (rank, job id) of the waiting jobs (a sortedcontainers.SortedList)
    #: (rank, job id) of the running jobs, best rank first when iterated or indexed; ``len``
    #: is O(1), and the first read after changes sorts them (a LazySortedIndex: read-only here)
    running: Any

    def running_jobs(self) -> Iterable[Job]:
        """The running jobs, best rank first."""


class Policy:
    """The neutral policy every built-in one refines.

    ``blocking``: stop at the first waiting job that does not fit (strict FIFO order), instead
    of backfilling smaller jobs behind it. ``preempts``: the engine asks :meth:`may_preempt`.
    ``las_thresholds``: attained-service levels in card-hours (Tiresias' discretised queues).
    """

    name: ClassVar[str] = "base"
    blocking: ClassVar[bool] = False
    preempts: ClassVar[bool] = False
    #: leading rank components a victim must be strictly worse in (unless it is reclaimed)
    rank_depth: ClassVar[int] = 2

    def __init__(self, las_thresholds: tuple[float, ...] = (), preempt_grace_s: float = 0.0):
        self.las_seconds = tuple(sorted(t * 3600.0 for t in las_thresholds))
        self.preempt_grace_s = preempt_grace_s
        self._types: dict[str, list[str]] = {}

    def level(self, attained: float) -> int:
        """The attained-service level of a job (0 = least served)."""
        return bisect.bisect_right(self.las_seconds, attained)

    def next_threshold(self, attained: float) -> float | None:
        """The attained service at which a running job drops one level; None at the last."""
        i = bisect.bisect_right(self.las_seconds, attained)
        return self.las_seconds[i] if i < len(self.las_seconds) else None

    def rank(self, job: Job, level: int) -> tuple[Any, ...]:
        """Sort key of the queue; smaller is served first."""
        return (job.submitted, job.id)

    def device_types(self, job: Job, engine: PoolView) -> list[str]:
        """Device types ``job`` may use, preferred first (memoised per job class); the
        engine's preferences, when it has some, reorder the policy's choice."""
        if job.job_class not in self._types:
            types = self.prefer_types(job.job_class, engine)
            if engine.preferences is not None:
                types = engine.preferences.order_types(job.job_class, types, engine.throughputs)
            self._types[job.job_class] = types
        return self._types[job.job_class]

    def prefer_types(self, job_class: str, engine: PoolView) -> list[str]:
        """The eligible types for ``job_class``, fastest first; policies may reorder."""
        cards = engine.throughputs
        eligible = [t for t in engine.cluster.types if cards.devices_for(job_class, 1, t)]
        return sorted(eligible, key=lambda t: (-cards.relative(job_class, t), t))

    def startable(self, job: Job, types: list[str], engine: PoolView, now: float) -> list[str]:
        """Of ``types`` (:meth:`device_types`), those ``job`` may start on now: all of them,
        unless the policy holds capacity for another job (EASY backfill's reservation)."""
        return types

    def may_preempt(self, waiting: Job, victim: Job, engine: PoolView, now: float) -> bool:
        return False


def load_policy(name: str, **settings: Any) -> Policy:
    """The policy plugin registered as ``pool-<name>``, created with ``settings``."""
    from xirang_core.plugins import get_registry

    registry = get_registry()
    names = policy_names()
    if name not in names:
        raise PoolError(f"unknown pool policy '{name}'; policies: {', '.join(names) or 'none'}")
    policy: Any
    if name in registry.names("policy"):
        policy = registry.create("policy", {"name": name, **settings})
    else:
        warnings.warn(
            f"pool policy '{name}' is registered as scheduler '{POLICY_PREFIX}{name}' "
            "(PoolPolicySpec through xirang_schedulers); register a PolicySpec through "
            "xirang_pool_policies: the old way goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        policy = registry.create("scheduler", {"name": POLICY_PREFIX + name, **settings})
    assert isinstance(policy, Policy)
    return policy


def policy_names() -> list[str]:
    """Names of the installed pool policies: those of the ``policy`` kind, and those still
    registered the old way (without the ``pool-`` prefix)."""
    from xirang_core.plugins import get_registry

    registry = get_registry()
    old = [
        n[len(POLICY_PREFIX) :]
        for n in registry.names("scheduler")
        if n.startswith(POLICY_PREFIX) and isinstance(registry.spec("scheduler", n), PoolPolicySpec)
    ]
    return sorted({*registry.names("policy"), *old})
