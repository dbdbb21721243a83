"""Metering: device time held by pool jobs and training runs becomes charges.

Pool jobs are metered from the pool store's usage segments (one per stretch a job held its
devices, closed at preemption, requeue or end) and its running jobs, charged up to ``now`` and
re-metered later (a charge is keyed by job and start, so it is replaced, never added twice).
What an executor reports in a job's payload refines the charge: ``utilisation`` (0-1, mean
device use) splits the held time into busy and idle, and ``run_ended_at`` (epoch s when the
training process exited) marks the devices held after the run ended as idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xirang_service.cost.charges import Charge
from xirang_service.cost.money import split_exact, to_micro
from xirang_service.cost.pricebook import PriceBook

#: the team of a project that names none
DEFAULT = "default"


@dataclass(frozen=True)
class Allocation:
    """Devices held by one pool job from ``start`` to ``end`` (``now`` while still held)."""

    job: int
    project: str
    device_type: str
    devices: int
    start: float
    end: float
    borrowed: bool = False


def pool_allocations(
    segments: Iterable[Mapping[str, Any]],
    jobs: Iterable[Any],
    now: float,
    device_types: Mapping[int, str] | None = None,
) -> list[Allocation]:
    """Every allocation of the pool: its closed usage segments (rows of the pool store's
    ``usage`` table) and its running jobs, held up to ``now``. A running job placed on several
    device types is one allocation per type (``device_types``: device id -> type), each priced
    at its own type's rate, as its usage segments are once it ends."""
    closed = [
        Allocation(
            s["job_id"],
            s["project"],
            s["device_type"],
            s["devices"],
            s["start"],
            s["end"],
            bool(s["borrowed"]),
        )
        for s in segments
    ]
    held = [
        Allocation(j.id, j.project, kind, count, j.started, now, j.borrowed)
        for j in jobs
        if j.state.value == "running" and j.started is not None
        for kind, count in _held_per_type(j, device_types or {}).items()
    ]
    return closed + held


def _held_per_type(job: Any, device_types: Mapping[int, str]) -> dict[str, int]:
    if len(job.held_types) <= 1:
        return {job.device_type: len(job.devices)}
    counts = {kind: 0 for kind in job.held_types}
    for device in job.devices:
        counts[device_types[device]] += 1
    return counts


class Meter:
    """Prices allocations with a price book and attributes them to project and team."""

    def __init__(self, book: PriceBook, capacity_class: str = "on_demand", energy: bool = False):
        self.book = book
        self.capacity_class = capacity_class
        self.energy = energy

    def charge(
        self,
        *,
        source: str,
        ref: str,
        project: str,
        team: str,
        device_type: str,
        devices: int,
        start: float,
        held_s: float,
        busy_s: float | None = None,
        capacity_class: str | None = None,
        **extra: Any,
    ) -> Charge:
        """One charge for ``devices`` held ``held_s`` from ``start``; idle part shown apart."""
        klass = capacity_class or self.capacity_class
        total = self.book.charge_micro(device_type, devices, start, held_s, klass, self.energy)
        busy = held_s if busy_s is None else min(max(busy_s, 0.0), held_s)
        return Charge(
            source=source,
            ref=ref,
            project=project,
            team=team,
            device_type=device_type,
            devices=devices,
            start=start,
            held_s=held_s,
            busy_s=busy,
            amount_micro=total,
            idle_micro=idle_part(total, busy, held_s),
            capacity_class=klass,
            energy_wh=self.book.energy_wh(device_type, devices, held_s),
            currency=self.book.currency,
            **extra,
        )

    def pool_charges(self, state: Any, now: float) -> list[Charge]:
        """Charges for every allocation in a pool state (see
        :func:`xirang_service.console.state.read_state`), running ones up to ``now``.

        Capacity inside a project's guarantee is priced as ``guaranteed``; borrowed capacity,
        which the pool may reclaim, as ``spot``.
        """
        teams = {p.name: p.team for p in state.projects}
        jobs = {j.id: j for j in state.jobs}
        return [
            self._pool_charge(alloc, jobs.get(alloc.job), teams.get(alloc.project, DEFAULT))
            for alloc in pool_allocations(state.segments, state.jobs, now, state.device_types)
            if alloc.devices > 0
        ]

    def _pool_charge(self, alloc: Allocation, job: Any, team: str) -> Charge:
        payload = _placement_report(alloc, job)
        held = max(0.0, alloc.end - alloc.start)
        idle_after = _idle_after(alloc, payload.get("run_ended_at"))
        utilisation = payload.get("utilisation")
        busy = held - idle_after
        if utilisation is not None:
            busy *= min(1.0, max(0.0, float(utilisation)))
        return self.charge(
            source="pool",
            ref=f"{alloc.job}@{alloc.start:.3f}",
            project=alloc.project,
            team=team,
            device_type=alloc.device_type,
            devices=alloc.devices,
            start=alloc.start,
            held_s=held,
            busy_s=busy,
            capacity_class="spot" if alloc.borrowed else "guaranteed",
            utilisation=None if utilisation is None else float(utilisation),
            idle_after_s=idle_after,
        )


def _placement_report(alloc: Allocation, job: Any) -> Mapping[str, Any]:
    """What the executor reported, for the allocation it describes: the job's current one (it
    runs) or the one its end closed; earlier placements (preempted, requeued) get nothing, so a
    charge never changes once its allocation closed - what incremental metering relies on."""
    if job is None:
        return {}
    current = job.state.value == "running" and job.started == alloc.start
    ended = job.finished is not None and job.finished == alloc.end
    return (job.payload or {}) if current or ended else {}


def _idle_after(alloc: Allocation, run_ended_at: Any) -> float:
    """Seconds the allocation was held after its run's process exited (0 when unknown)."""
    if run_ended_at is None or not alloc.start < float(run_ended_at) <= alloc.end:
        return 0.0
    return alloc.end - float(run_ended_at)


def idle_part(total_micro: int, busy_s: float, held_s: float) -> int:
    """The idle share of ``total_micro`` (exact: busy part + idle part == total)."""
    idle = max(0.0, held_s - busy_s)
    if total_micro == 0 or idle == 0:
        return 0
    if busy_s <= 0:
        return total_micro
    return split_exact(total_micro, {"busy": busy_s, "idle": idle})["idle"]


def run_charge(
    summary: Mapping[str, Any],
    config: Mapping[str, Any],
    end: float,
    watts: float = 0.0,
    amount: float | None = None,
) -> Charge:
    """The charge of a finished training run, priced by the run's own cost policy quote (or
    ``amount`` when the caller re-priced it), drawing ``watts`` per device."""
    runtime = config.get("runtime") or {}
    wall = float(summary.get("wall_time_s") or 0.0)
    cost = summary.get("cost") or {}
    first, final = summary.get("first_loss"), summary.get("final_loss")
    devices = int(runtime.get("devices") or summary.get("world_size") or 1)
    return Charge(
        source="run",
        ref=str(summary.get("run_dir") or ""),
        project=str(summary.get("project") or config.get("project") or "default"),
        team=str(config.get("team") or DEFAULT),
        device_type=str(runtime.get("device_type") or ""),
        devices=devices,
        start=end - wall,
        held_s=wall,
        busy_s=wall,
        amount_micro=to_micro(float(cost.get("amount") or 0.0) if amount is None else amount),
        energy_wh=watts * devices * wall / 3600,
        currency=str(cost.get("currency") or "USD"),
        tokens=int(summary.get("tokens") or 0),
        loss_drop=float(first - final) if first is not None and final is not None else 0.0,
    )
