"""The pool's state machine: submit, schedule, preempt, complete, drain.

One engine serves both the REST service and the simulator: they differ only in where time comes
from and who consumes the :class:`Event` records it emits. A scheduling pass walks the queue in
the policy's order and, for each job, tries the device types the policy allows, placing the whole
gang or nothing. Jobs that would run on borrowed capacity are tried after those that fit in
their project's guarantee, so one pass does not lend capacity it must reclaim at once. A job
that cannot be placed may preempt running jobs the policy allows; preempted jobs are told (a
``preempted`` event), lose their devices and are requeued with their attained service kept.

Costs are bounded for large pools: the queue is a sorted container kept up to date
incrementally, the running indices take changes in O(1) and sort when read
(:mod:`~xirang_service.pool.lazyindex`), the pass stops once nothing is free or ``patience`` jobs
in a row found no room, backfill looks at most ``max_scan`` jobs (Slurm's default queue depth
is 100), at most ``preempt_scan`` jobs may try preemption per pass and each looks at no more than
``max_victims`` candidates per group.

With :class:`~xirang_service.pool.policy.Preferences` (a pool with a price book), a pass first
reclaims the running jobs they name (stopped like preempted ones, with the reason) and skips the
queued jobs they hold back, e.g. interruptible work waiting for a cheap window.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from xirang_service.pool.cards import DEFAULT_CLASS, Throughputs
from xirang_service.pool.cluster import Inventory
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import MIX, Job, JobState, check_cards, parse_priority, priority_name
from xirang_service.pool.lazyindex import LazySortedIndex
from xirang_service.pool.placement import place, place_mixed
from xirang_service.pool.policy import Policy, Preferences
from xirang_service.pool.quota import Project, QuotaBook


@dataclass(frozen=True)
class Event:
    """Something that happened to a job or node; executors and stores consume these."""

    time: float
    kind: str
    job: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Segment:
    """One stretch of a job on its devices: what usage metering and cost attribution read."""

    job: int
    project: str
    device_type: str
    start: float
    end: float
    devices: int
    cards: int
    borrowed: bool


@dataclass(slots=True)
class PassState:
    """What one scheduling pass has tried: jobs looked at, preemption attempts, misses in a
    row and the (class, cards, allows mixing) shapes that found no free devices."""

    scan: int = 0
    preempt: int = 0
    misses: int = 0
    failed: set[tuple[str, int, bool]] = field(default_factory=set)


class PoolEngine:
    def __init__(
        self,
        cluster: Inventory,
        throughputs: Throughputs,
        policy: Policy,
        quotas: QuotaBook | None = None,
        max_scan: int = 100,
        patience: int = 32,
        preempt_scan: int = 4,
        max_victims: int = 64,
        preferences: Preferences | None = None,
    ) -> None:
        self.cluster = cluster
        self.preferences = preferences
        self.throughputs = throughputs
        self.policy = policy
        self.quotas = quotas or QuotaBook()
        self.max_scan = max_scan
        self.preempt_scan = preempt_scan
        self.max_victims = max_victims
        self.patience = patience
        self.jobs: dict[int, Job] = {}
        self.queue: SortedList = SortedList()
        # (rank, job id) of every running job, and what the victim search reads (flat entries,
        # hundreds to thousands each): changed at every start, stop and demotion, each sorted
        # when it is read (a pass reads few of them)
        self.running = LazySortedIndex()
        self._own: dict[tuple[str, str], LazySortedIndex] = defaultdict(LazySortedIndex)
        self._borrowed = {t: LazySortedIndex() for t in cluster.types}
        self._keys: dict[int, tuple[Any, ...]] = {}
        # when running jobs cross a service level (a heap of times) and who: jobs started
        # together cross together, so one time serves them all (one heap entry, not thousands)
        self._demotions: list[float] = []
        self._demoting: dict[float, list[tuple[int, float]]] = {}  # time -> (job id, started)
        self.events: list[Event] = []
        self.segments: list[Segment] = []
        self.next_id = 1
        #: why each queued job the last pass looked at did not start (Slurm's pending reason);
        #: a new dict every pass, so a published view may keep the last one as it is
        self.waiting: dict[int, str] = {}

    # --- requests ---------------------------------------------------------------------------

    def submit(
        self,
        project: str,
        cards: int,
        now: float,
        job_class: str = DEFAULT_CLASS,
        priority: int = 1,
        **extra: Any,
    ) -> Job:
        """Queue a new job; validates the project, the size and that some device type fits it."""
        self.quotas.project(project)
        job = Job(self.next_id, project, check_cards(cards), job_class, priority, **extra)
        job.submitted = now
        if not self._fits_somewhere(job):
            raise PoolError(
                f"{cards} cards of class '{job_class}' can never fit this pool "
                f"(capacity by type: {self._capacity_text()})"
            )
        self.next_id += 1
        self.jobs[job.id] = job
        self._enqueue(job)
        self._emit(now, "submitted", job)
        return job

    def cancel(self, job_id: int, now: float) -> Job:
        job = self.job(job_id)
        if job.state.finished:
            raise PoolError(f"job {job_id} already ended ({job.state.value})", 409)
        self._end(job, JobState.CANCELLED, now)
        return job

    def complete(self, job_id: int, now: float, ok: bool = True) -> Job:
        """The executor reports a running job ended (``ok``: exit status 0)."""
        job = self.job(job_id)
        if job.state is not JobState.RUNNING:
            raise PoolError(f"job {job_id} is not running ({job.state.value})", 409)
        self._end(job, JobState.DONE if ok else JobState.FAILED, now)
        return job

    def drain(self, node_name: str, now: float, reason: str = "health probe failed") -> list[Job]:
        """Take a failing node out of service; its jobs are requeued (not failed)."""
        node = self.cluster.node(node_name)
        victims = [self.jobs[i] for _, i in self.running if self._on_node(self.jobs[i], node.id)]
        for job in victims:
            self._stop(job, now)
            job.requeues += 1
            self._emit(now, "requeued", job, reason=f"node {node_name} drained: {reason}")
        self.cluster.set_health(node_name, False)
        self.events.append(Event(now, "node_drained", None, {"node": node_name, "reason": reason}))
        return victims

    def note_straggler(self, job: Job, now: float, **detail: Any) -> None:
        """A running job's run reported a straggler (its history shows it, and what the pool
        did about it)."""
        self._emit(now, "straggler", job, **detail)

    def undrain(self, node_name: str, now: float) -> None:
        """Put a repaired node back into service."""
        self.cluster.set_health(node_name, True)
        self.events.append(Event(now, "node_restored", None, {"node": node_name}))

    def reload(self, job: Job, now: float) -> None:
        """Take back a job from the state store after a restart, on the devices it held; a job
        the pool cannot take back raises :class:`PoolError` naming why, before anything changes
        (the store sets such a row aside)."""
        self._check_restorable(job)
        self.jobs[job.id] = job
        self.next_id = max(self.next_id, job.id + 1)
        if job.state is JobState.QUEUED:
            self._enqueue(job)
        elif job.state is JobState.RUNNING:
            healthy = all(self.cluster.node_of(d).healthy for d in job.devices)
            if not healthy:  # its node was drained while the service was down
                job.state, job.devices, job.started = JobState.QUEUED, (), None
                job.requeues += 1
                self._enqueue(job)
                self._emit(now, "requeued", job, reason="its node was drained while stopped")
                return
            self.cluster.take(job.devices)
            borrowed = job.borrowed
            self.quotas.admit(job)
            if job.borrowed != borrowed:  # keep the flag the job was admitted with
                self.quotas.borrowed[job.project] += job.cards if borrowed else -job.cards
                job.borrowed = borrowed
            self._index_running(job, now)

    def _check_restorable(self, job: Job) -> None:
        """Why a stored job cannot come back (a PoolError), for a queued or running one: an
        unknown project, a size or class the pool cannot hold, devices it cannot hold."""
        if job.id in self.jobs:
            raise PoolError(f"job {job.id} is stored twice")
        if job.state.finished:
            return
        self.quotas.project(job.project)
        check_cards(job.cards)
        parse_priority(job.priority)
        if not self._fits_somewhere(job):
            raise PoolError(f"{job.cards} cards of class '{job.job_class}' can never fit")
        if job.state is JobState.RUNNING:
            self._check_devices(job)

    def _check_devices(self, job: Job) -> None:
        """A running job's devices: some, each one of this pool's, free, of its device types."""
        if not job.devices:
            raise PoolError(f"job {job.id} is running on no devices")
        if len(set(job.devices)) != len(job.devices):
            raise PoolError(f"job {job.id} holds a device twice: {list(job.devices)}")
        types = set(job.held_types)
        for device in job.devices:
            if not 0 <= device < len(self.cluster.device_node):
                raise PoolError(f"device {device} is not one of this pool's")
            node = self.cluster.node_of(device)
            if device not in node.free:
                raise PoolError(f"device {device} on {node.name} is held by another job")
            if node.type not in types:
                raise PoolError(f"device {device} is a {node.type}, not {job.device_type}")

    def reprioritise(self, job_id: int, priority: int, now: float, reason: str = "") -> Job:
        """Move a queued job to another priority class (e.g. a budget's ``lower_priority``),
        re-ranked in the queue at once; a ``reprioritised`` event records it."""
        job = self.job(job_id)
        if job.state is not JobState.QUEUED:
            raise PoolError(f"job {job_id} is not queued ({job.state.value})", 409)
        self.queue.remove((self._keys[job.id], job.id))
        job.priority = priority
        self._enqueue(job)
        self._emit(now, "reprioritised", job, priority=priority, reason=reason)
        return job

    def set_quota(self, project: Project) -> None:
        """Create or edit a project and re-split its running jobs into guaranteed and borrowed:
        after a cut, its worst-ranked jobs become borrowed (reclaimable); after a raise, its
        best-ranked borrowed jobs move inside the guarantee."""
        self.quotas.upsert(project)
        mine = [self.jobs[i] for _, i in self.running if self.jobs[i].project == project.name]
        for job in mine:  # best ranked first
            self._unindex_running(job)
            self.quotas.release(job)
        inside = 0
        for job in mine:
            job.borrowed = inside + job.cards > project.guaranteed
            inside += 0 if job.borrowed else job.cards
            self.quotas.used[job.project] += job.cards
            self.quotas.borrowed[job.project] += job.cards if job.borrowed else 0
            self._rekey_running(job)

    def job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise PoolError(f"no job {job_id}", 404) from None

    # --- the scheduling pass ----------------------------------------------------------------

    def schedule(self, now: float) -> list[Event]:
        """One pass: place what fits, preempt what the policy allows; returns new events."""
        start = len(self.events)
        self._apply_demotions(now)
        self._reclaim(now)
        deferred: list[Job] = []
        tries = PassState()
        # this loop runs for every job of every pass (a whole-trace replay makes hundreds of
        # thousands of passes), so its cheap tests come before any call
        blocking, held = self.policy.blocking, self.preferences is not None
        within, failed = self.quotas.within_guarantee, tries.failed
        self.waiting = waiting = {}
        for _, job_id in self.queue[: self.max_scan]:
            if self._exhausted(tries):
                break
            job = self.jobs[job_id]
            if held and self._held(job, now):
                continue
            if (job.job_class, job.cards, job.allow_mixing) in failed and self._hopeless(
                job, tries
            ):
                continue
            if not blocking and not within(job):
                waiting[job_id] = f"beyond project {job.project}'s guarantee: tried after the rest"
                deferred.append(job)
                continue
            if not self._try(job, now, tries) and blocking:
                break
        else:
            for job in deferred:
                if self._exhausted(tries):
                    break
                if (job.job_class, job.cards, job.allow_mixing) in failed and self._hopeless(
                    job, tries
                ):
                    continue  # counted as tried, as _try would have, without its calls
                if not self._try(job, now, tries) and self.policy.blocking:
                    break
        return self.events[start:]

    def _held(self, job: Job, now: float) -> bool:
        """Whether the preferences keep ``job`` waiting (a cheaper window, a deadline)."""
        why = self.preferences.hold(job, now) if self.preferences is not None else None
        if why is not None:
            self.waiting[job.id] = f"held: {why}"
        return why is not None

    def _no_room(self, job: Job, types: list[str]) -> str:
        """Why ``job`` found no devices: how many it needs of each type it may use, and free."""
        free, devices_for = self.cluster.type_free, self.throughputs.devices_for
        needs = [
            f"{devices_for(job.job_class, job.cards, t) or '-'} {t} ({free.get(t, 0)} free)"
            for t in types
        ]
        return f"no room: needs {' or '.join(needs) or 'a device type that fits'}"

    def _reclaim(self, now: float) -> None:
        """Stop the running jobs the preferences reclaim, as preemption stops them (they
        checkpoint and requeue); the reason goes with the ``preempted`` event."""
        if self.preferences is None:
            return
        for job, reason in self.preferences.reclaim(list(self.running_jobs()), now):
            self._stop(job, now)
            job.preemptions += 1
            self._emit(now, "preempted", job, reason=reason)

    def _exhausted(self, tries: PassState) -> bool:
        """Nothing more this pass: scan depth reached, or no free devices and no preemption."""
        if tries.scan >= self.max_scan:
            return True
        if self.policy.preempts and tries.preempt < self.preempt_scan:
            return False
        return self.cluster.total_free == 0 or tries.misses >= self.patience

    def _hopeless(self, job: Job, tries: PassState) -> bool:
        """A job whose shape already failed this pass, when it may not try preemption."""
        shape = (job.job_class, job.cards, job.allow_mixing)
        if shape in tries.failed and not self._can_preempt(tries):
            tries.scan += 1
            tries.misses += 1
            self.waiting[job.id] = self._no_room(job, self.policy.device_types(job, self))
            return not self.policy.blocking
        return False

    def _can_preempt(self, tries: PassState) -> bool:
        return self.policy.preempts and tries.preempt < self.preempt_scan

    def _try(self, job: Job, now: float, tries: PassState) -> bool:
        """Place ``job`` on free devices, else by preemption; True when it started.

        A (class, cards) shape that found no free devices cannot find any later in the same
        pass unless a preemption frees some, so it is not tried again until then.
        """
        tries.scan += 1
        tries.misses += 1
        if not self.quotas.may_borrow(job):
            self.waiting[job.id] = self.quotas.over_limit(job)
            return False
        types = self.policy.device_types(job, self)
        usable = self.policy.startable(job, types, self, now)
        shape = (job.job_class, job.cards, job.allow_mixing)
        if shape not in tries.failed:
            if self._place_free(job, usable, now):
                tries.misses = 0
                return True
            if len(usable) == len(types):  # no room, rather than types held for another job
                tries.failed.add(shape)
        if self.policy.preempts and tries.preempt < self.preempt_scan:
            tries.preempt += 1
            if self._preempt_for(job, types, now):
                tries.failed.clear()
                tries.misses = 0
                return True
        reserved = [t for t in types if t not in usable]
        held = f"; {', '.join(reserved)} held for a job ahead" if reserved else ""
        self.waiting[job.id] = self._no_room(job, usable) + held
        return False

    def _place_free(self, job: Job, types: list[str], now: float) -> bool:
        """Start ``job`` on free devices of one type, the policy's preferred first; failing
        that, a job that allows mixing spans several types (cards converted per type)."""
        free, devices_for = self.cluster.type_free, self.throughputs.devices_for
        for device_type in types:
            need = devices_for(job.job_class, job.cards, device_type)
            # most tries find too few free devices: tested here before any placement call
            if not need or free.get(device_type, 0) < need:
                continue
            devices = place(self.cluster, device_type, need)
            if devices:
                self._start(job, device_type, devices, now)
                return True
        if not job.allow_mixing or len(types) < 2:
            return False
        plan = place_mixed(self.cluster, self.throughputs, job.job_class, job.cards, types)
        if plan is None:
            return False
        devices = [d for _, part in plan for d in part]
        self._start(job, MIX.join(t for t, _ in plan), devices, now)
        return True

    def _preempt_for(self, job: Job, types: list[str], now: float) -> bool:
        """Preempt the fewest worst-ranked allowed victims on one device type, then place."""
        reclaim = self._may_reclaim(job)  # changes only when victims were stopped
        for device_type in types:
            need = self.throughputs.devices_for(job.job_class, job.cards, device_type) or 0
            victims = self._victims(job, device_type, need, now, reclaim)
            if victims is None:
                continue
            for victim in victims:
                why = _preempted_why(job, victim)  # before the stop clears its borrowing
                self._stop(victim, now)
                victim.preemptions += 1
                self._emit(now, "preempted", victim, by=job.id, reason=why)
            devices = place(self.cluster, device_type, need)
            if devices:
                self._start(job, device_type, devices, now)
                return True
            reclaim = self._may_reclaim(job)
        return False

    def _victims(
        self, job: Job, device_type: str, need: int, now: float, reclaim: bool
    ) -> list[Job] | None:
        """The worst-ranked running jobs the policy lets ``job`` preempt on ``device_type``,
        just enough of them; None when even all of them would not make room."""
        short = need - self.cluster.type_free.get(device_type, 0)
        if short <= 0:
            return None  # free capacity exists but is fragmented: preemption would not help
        key = self._keys[job.id]
        depth = min(self.policy.rank_depth, len(key))
        mine = key[:depth]
        chosen: dict[int, Job] = {}
        # own project's worse-ranked jobs, then borrowed jobs (worse-ranked, or any on reclaim)
        pools = [(self._borrowed[device_type], reclaim)]
        if job.cards <= self.quotas.projects[job.project].guaranteed:
            pools.insert(0, (self._own[(job.project, device_type)], False))
        for pool, any_rank in pools:
            if not pool or (not any_rank and pool[-1][:depth] <= mine):
                continue  # even its worst-ranked job ranks as high as the waiting one
            for looked, entry in enumerate(reversed(pool)):  # entries are (*rank, job id)
                if looked >= self.max_victims or (not any_rank and entry[:depth] <= mine):
                    break  # from here on every job ranks as high as the waiting one
                victim_id = entry[-1]
                if victim_id not in chosen:
                    short = self._consider(job, victim_id, chosen, short, now, device_type)
                    if short <= 0:
                        return list(chosen.values())
        return None

    def _consider(
        self,
        job: Job,
        victim_id: int,
        chosen: dict[int, Job],
        short: int,
        now: float,
        device_type: str,
    ) -> int:
        """Add a victim the policy allows; returns how many devices of ``device_type`` are
        still missing (a mixed victim frees only its devices of that type there)."""
        victim = self.jobs[victim_id]
        if self.policy.may_preempt(job, victim, self, now):
            chosen[victim_id] = victim
            short -= self._healthy_devices(victim, device_type)
        return short

    def _may_reclaim(self, job: Job) -> bool:
        """Whether ``job`` may take back its guarantee from other projects' borrowed jobs."""
        others = self.quotas.total_borrowed() - self.quotas.borrowed[job.project]
        return others > 0 and self.quotas.within_guarantee(job)

    # --- state changes ----------------------------------------------------------------------

    def _start(self, job: Job, device_type: str, devices: list[int], now: float) -> None:
        self.queue.remove((self._keys[job.id], job.id))
        self.cluster.take(devices)
        self.quotas.admit(job)
        job.state, job.started = JobState.RUNNING, now
        job.devices, job.device_type = tuple(devices), device_type
        self._index_running(job, now)
        self._emit(now, "started", job, devices=list(devices), device_type=device_type)

    def _stop(self, job: Job, now: float) -> None:
        """Take a running job off its devices and back into the queue."""
        self._release(job, now)
        job.state = JobState.QUEUED
        self._enqueue(job)

    def _release(self, job: Job, now: float) -> None:
        self._unindex_running(job)
        if job.started is not None:
            for device_type, devices, cards in self._shares(job):
                self.segments.append(
                    Segment(
                        job.id,
                        job.project,
                        device_type,
                        job.started,
                        now,
                        devices,
                        cards,
                        job.borrowed,
                    )
                )
        job.attained = job.attained_at(now)
        self.cluster.release(job.devices)
        self.quotas.release(job)
        job.devices, job.started = (), None

    def _shares(self, job: Job) -> list[tuple[str, int, int]]:
        """(type, devices, cards) per device type a job holds, for usage segments: a mixed
        job's cards split by what each type's devices are worth to its class."""
        if len(job.held_types) == 1:
            return [(job.device_type, len(job.devices), job.cards)]
        counts = {t: 0 for t in job.held_types}
        for d in job.devices:
            counts[self.cluster.node_of(d).type] += 1
        worth = {t: n * self.throughputs.relative(job.job_class, t) for t, n in counts.items()}
        total, shares, given = sum(worth.values()) or 1.0, [], 0
        for i, (t, n) in enumerate(counts.items()):
            last = i == len(counts) - 1
            cards = (
                job.cards - given
                if last
                else min(job.cards - given, round(job.cards * worth[t] / total))
            )
            given += cards
            shares.append((t, n, cards))
        return shares

    def _end(self, job: Job, state: JobState, now: float) -> None:
        """End ``job``; one that ran keeps when its last run started (its row shows it)."""
        if job.state is JobState.RUNNING:
            started = job.started
            self._release(job, now)
            job.started = started
        elif job.state is JobState.QUEUED:
            self.queue.remove((self._keys[job.id], job.id))
        job.state, job.finished = state, now
        self._keys.pop(job.id, None)
        self._emit(now, state.value, job)

    def _enqueue(self, job: Job) -> None:
        key = self.policy.rank(job, self.policy.level(job.attained))
        self._keys[job.id] = key
        self.queue.add((key, job.id))

    def _index_running(self, job: Job, now: float) -> None:
        self._keys[job.id] = self._running_key(job, now)
        self._rekey_running(job)

    def _running_key(self, job: Job, now: float) -> tuple[Any, ...]:
        """A running job's rank at ``now``; schedules its next demotion (if it has one)."""
        attained = job.attained_at(now)
        threshold = self.policy.next_threshold(attained)
        if threshold is not None and now + (threshold - attained) / job.cards <= now:
            # at its demotion time but a rounding short of the threshold (large clock values):
            # it has crossed, else the demotion would fire again at this same instant forever
            attained = threshold
            threshold = self.policy.next_threshold(attained)
        if threshold is not None:
            at = now + (threshold - attained) / job.cards
            due = self._demoting.get(at)
            if due is None:
                self._demoting[at] = due = []
                heapq.heappush(self._demotions, at)
            due.append((job.id, job.started or 0.0))
        return self.policy.rank(job, self.policy.level(attained))

    def _rekey_running(self, job: Job) -> None:
        """Put a running job back into the running indices under its current key."""
        self._change_running(job, LazySortedIndex.add)

    def _unindex_running(self, job: Job) -> None:
        self._change_running(job, LazySortedIndex.remove)

    def _rerank_running(self, job: Job, now: float) -> None:
        """Give a running job its rank at ``now`` in the running indices (a demotion)."""
        self._keys[job.id] = self._running_key(job, now)
        self._change_running(job, LazySortedIndex.replace)

    def _change_running(
        self, job: Job, change: Callable[[LazySortedIndex, tuple[Any, ...]], None]
    ) -> None:
        """``change`` (add, remove or replace) ``job``'s entry under its current key in every
        running index that holds it: ``(key, id)`` in all running jobs, flat in the others."""
        key = self._keys[job.id]
        change(self.running, (key, job.id))
        flat = (*key, job.id)
        for index in self._victim_indices(job):
            change(index, flat)

    def _victim_indices(self, job: Job) -> list[LazySortedIndex]:
        """The victim search's indices that hold ``job``: its project's per type it holds,
        and the borrowed ones per type when it runs on borrowed capacity. Their entries are
        flat ``(*rank, job id)``: one tuple to walk per comparison, not two."""
        if job.device_type and MIX not in job.device_type:  # one type: most starts and stops
            own = self._own[(job.project, job.device_type)]
            return [own, self._borrowed[job.device_type]] if job.borrowed else [own]
        held = job.held_types
        indices = [self._own[(job.project, t)] for t in held]
        if job.borrowed:
            indices.extend(self._borrowed[t] for t in held)
        return indices

    def _apply_demotions(self, now: float) -> None:
        """Re-rank running jobs whose attained service crossed a level since the last pass.

        Jobs started together cross a level together (a burst of arrivals, a restart): the
        indices take each move in O(1) and sort once, when next read (see
        :mod:`~xirang_service.pool.lazyindex`)."""
        jobs = self.jobs
        while self._demotions and self._demotions[0] <= now:
            for job_id, started in self._demoting.pop(heapq.heappop(self._demotions)):
                job = jobs[job_id]
                if job.state is JobState.RUNNING and job.started == started:
                    self._rerank_running(job, now)

    def next_demotion(self) -> float | None:
        """When the next running job may cross a service level (the simulator wakes then)."""
        return self._demotions[0] if self._demotions else None

    # --- helpers ----------------------------------------------------------------------------

    def _emit(self, now: float, kind: str, job: Job, **detail: Any) -> None:
        self.events.append(Event(now, kind, job.id, detail))

    def _fits_somewhere(self, job: Job) -> bool:
        """Whether the whole pool could ever hold ``job``: on one type, or (mixing) on all."""
        worth = 0.0
        for device_type in self.cluster.types:
            need = self.throughputs.devices_for(job.job_class, job.cards, device_type)
            capacity = self.cluster.capacity(device_type, healthy_only=False)
            if need and need <= capacity:
                return True
            if need is not None:
                worth += capacity * self.throughputs.relative(job.job_class, device_type)
        return job.allow_mixing and worth >= job.cards - 1e-9

    def _capacity_text(self) -> str:
        types = self.cluster.types
        return ", ".join(f"{t}={self.cluster.capacity(t, healthy_only=False)}" for t in types)

    def _on_node(self, job: Job, node_id: int) -> bool:
        return any(self.cluster.device_node[d] == node_id for d in job.devices)

    def _healthy_devices(self, job: Job, device_type: str) -> int:
        """Devices of ``job`` on healthy ``device_type`` nodes (asked for every victim looked
        at, so it indexes the node table directly: a running job holds no unowned id)."""
        nodes, node_ids = self.cluster.nodes, self.cluster.device_node
        count = 0
        for device in job.devices:
            node = nodes[node_ids[device]]
            count += node.healthy and node.type == device_type
        return count

    def running_jobs(self) -> Iterable[Job]:
        return (self.jobs[jid] for _, jid in self.running)

    def queued_jobs(self) -> Iterable[Job]:
        return (self.jobs[jid] for _, jid in self.queue)


def _preempted_why(job: Job, victim: Job) -> str:
    """Why ``job`` took ``victim``'s devices, as ``xirang pool history`` tells the victim's
    owner: its project reclaimed a guarantee the victim borrowed, or it ranks ahead."""
    if victim.borrowed and victim.project != job.project:
        return (
            f"project {job.project} reclaimed its guaranteed share, which this job "
            f"(project {victim.project}) ran on as borrowed capacity"
        )
    return (
        f"job {job.id} ({priority_name(job.priority)} priority) ranks ahead of this job "
        f"({priority_name(victim.priority)} priority)"
    )
