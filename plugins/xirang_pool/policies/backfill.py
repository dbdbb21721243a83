"""FIFO with EASY backfilling (Lifka 1995; Slurm's ``sched/backfill``): what clusters run.

Jobs are served in arrival order. When the queue's head does not fit, it gets a reservation:
the earliest time enough devices of one of its device types are free, judged from the running
jobs' expected ends (its *shadow time*), and the devices that will be spare at that time beyond
its need (its *extra* devices). A later job may start now only where it cannot delay that
reservation: on another device type, or on the reserved type when it is expected to end by the
shadow time or takes no more than the extra devices. No preemption.

Expected run times come from ``Job.work`` (reference card-seconds). The simulator sets it from
the trace, so estimates are exact: the most favourable case for EASY, the baseline a reviewer
accepts (real users over-estimate their limits, which makes EASY backfill less). A job without
an estimate (``work`` 0, as in the service, which never asks for durations) is treated as
running until further notice: it backfills only into extra devices, and the head waits for it.

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from xirang.pool import Policy

if TYPE_CHECKING:
    from xirang.pool import Job, PoolView


@dataclass(frozen=True)
class Reservation:
    """The head job's promise: ``need`` devices of ``device_type`` from ``shadow`` on, with
    ``extra`` devices of that type spare at that time."""

    job: int
    device_type: str
    shadow: float
    need: int
    extra: int


class FifoBackfill(Policy):
    """Arrival order; later jobs backfill where they do not delay the head's reservation."""

    name: ClassVar[str] = "fifo-backfill"

    def __init__(self) -> None:
        super().__init__()
        self._cached: tuple[tuple[float, int, int, int], Reservation | None] | None = None

    def startable(self, job: Job, types: list[str], engine: PoolView, now: float) -> list[str]:
        """``types`` less the reserved type where ``job`` would delay the head."""
        reservation = self.reservation(engine, now)
        if reservation is None or reservation.job == job.id:
            return types
        keep = reservation.device_type
        return [t for t in types if t != keep or self._harmless(job, t, now, reservation, engine)]

    def reservation(self, engine: PoolView, now: float) -> Reservation | None:
        """The queue head's reservation now (None with an empty queue); recomputed when the
        free devices or the running set changed, so backfilled jobs are accounted for."""
        if not engine.queue:
            return None
        head = engine.jobs[engine.queue[0][1]]
        key = (now, head.id, engine.cluster.total_free, len(engine.running))
        if self._cached is None or self._cached[0] != key:
            self._cached = (key, self._reserve(head, engine, now))
        return self._cached[1]

    def _reserve(self, head: Job, engine: PoolView, now: float) -> Reservation | None:
        """The earliest (shadow time, type) at which ``head`` fits, the policy's type order
        breaking ties. When running jobs without estimates hold every type, the shadow time is
        unknown (inf): the type where the head is shortest of devices is held for it, nothing
        else starts there."""
        ends: dict[str, list[tuple[float, int]]] | None = None
        options = []
        for rank, device_type in enumerate(super().device_types(head, engine)):
            need = engine.throughputs.devices_for(head.job_class, head.cards, device_type) or 0
            free = engine.cluster.type_free.get(device_type, 0)
            if free < need and ends is None:
                ends = _ends_by_type(engine, now)  # only a head that must wait needs them
            shadow, spare = _shadow(now, free, need, (ends or {}).get(device_type, []))
            extra = spare - need if shadow < math.inf else 0
            reservation = Reservation(head.id, device_type, shadow, need, extra)
            options.append((shadow, max(0, need - free), rank, reservation))
        return min(options)[-1] if options else None

    def _harmless(
        self, job: Job, device_type: str, now: float, reservation: Reservation, engine: PoolView
    ) -> bool:
        """Whether ``job`` on the reserved type leaves the reservation intact."""
        need = engine.throughputs.devices_for(job.job_class, job.cards, device_type) or 0
        if need <= reservation.extra:
            return True
        rate = need * engine.throughputs.relative(job.job_class, device_type)
        ends = job.work > 0 and rate > 0 and now + job.work / rate <= reservation.shadow
        return ends and reservation.shadow < math.inf


def _ends_by_type(engine: PoolView, now: float) -> dict[str, list[tuple[float, int]]]:
    """(expected end, devices held) of every running job, per device type, soonest first."""
    cluster, relative = engine.cluster, engine.throughputs.relative
    ends: dict[str, list[tuple[float, int]]] = {}
    for job in engine.running_jobs():
        held = {job.device_type: len(job.devices)}
        if len(job.held_types) > 1:  # a mixed placement: count its devices per type
            held = {}
            for device in job.devices:
                t = cluster.node_of(device).type
                held[t] = held.get(t, 0) + 1
        rate = sum(n * relative(job.job_class, t) for t, n in held.items())
        left = max(0.0, job.work - job.attained) if job.work > 0 else math.inf
        start = job.started if job.started is not None else now
        end = start + left / rate if rate > 0 else math.inf
        for t, n in held.items():
            ends.setdefault(t, []).append((end, n))
    for rows in ends.values():
        rows.sort()
    return ends


def _shadow(now: float, free: int, need: int, ends: list[tuple[float, int]]) -> tuple[float, int]:
    """When ``need`` devices are free given ``free`` now and the running jobs' ``ends``, and how
    many are free then (all jobs ending by that time counted); (inf, free) when never."""
    if need <= 0:
        return math.inf, free
    if free >= need:
        return now, free
    for i, (end, devices) in enumerate(ends):
        free += devices
        if free >= need and end < math.inf:
            for later, more in ends[i + 1 :]:
                if later > end:
                    break
                free += more
            return end, free
    return math.inf, free
