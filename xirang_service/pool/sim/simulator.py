"""Replay a job trace through the pool engine with a policy plugin, in simulated time.

The simulator owns only the clock and the jobs' progress; every decision is the engine's and the
policy's, the same code the service runs. A started job runs at the speed of its devices for its
class (devices x relative throughput, in reference cards); a preempted or requeued job keeps the
work it did (it checkpointed when told) and pays ``restart_s`` when it starts again.

``mixing`` says what a job may do across device types: ``off`` (every job on one type, as
most pools), ``even`` (jobs may mix, and their run splits the batch evenly, as DDP, FSDP and
torchtitan do: every device works at the slowest one's pace) or ``balanced`` (jobs may mix and
each device takes a share of the batch by its speed: the sum of the devices' speeds, times
``balance_efficiency``, what a balanced run measures against that sum: 0.95 by default, the
project's own figure, ``benchmarks/hetero.py``'s ``hetero_efficiency`` of 0.953).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from xirang_service.pool import clusterfile
from xirang_service.pool.engine import Event, PoolEngine
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import MIX, Job
from xirang_service.pool.policy import Preferences, load_policy
from xirang_service.pool.quota import Project
from xirang_service.pool.sim.traces import TraceJob

ARRIVE, FINISH, WAKE = 0, 1, 2
#: what a job may do across device types (see the module's docstring)
MIXING = ("off", "even", "balanced")
#: a balanced mixed run's throughput over the sum of its devices' solo ones (measured: 0.953)
BALANCE_EFFICIENCY = 0.95


@dataclass
class Progress:
    """A simulated job's progress: work left and the run now under way."""

    left: float
    rate: float = 0.0
    since: float = 0.0
    restarts: int = 0
    started_once: float | None = None
    finish_at: float = math.inf
    devices: int = 0


@dataclass
class Result:
    policy: str
    mixing: str
    jobs: int
    finished: int
    rejected: int
    avg_jct_h: float
    p50_jct_h: float
    p95_jct_h: float
    avg_queue_h: float
    utilisation: float
    preemptions: int
    fragmentation: float
    wall_s: float
    cpu_s: float
    #: the offered load the trace was replayed at (inter-arrival times divided by it)
    load: float = 1.0
    jct_by_job: dict[int, float] = field(default_factory=dict, repr=False)

    def row(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "jct_by_job"}


class Simulator:
    def __init__(
        self,
        cluster_data: dict,
        policy: str,
        restart_s: float = 30.0,
        preferences: Preferences | None = None,
        mixing: str = "off",
        balance_efficiency: float = BALANCE_EFFICIENCY,
        **settings: Any,
    ):
        if mixing not in MIXING:
            raise PoolError(f"mixing={mixing!r}: one of {', '.join(MIXING)}")
        if not 0 < balance_efficiency <= 1:
            raise PoolError(f"balance_efficiency={balance_efficiency}: a fraction in (0, 1]")
        self.mixing, self.balance_efficiency = mixing, balance_efficiency
        cluster, throughputs, quotas = clusterfile.build(dict(cluster_data))
        self.engine = PoolEngine(
            cluster,
            throughputs,
            load_policy(policy, **settings),
            quotas,
            preferences=preferences,
        )
        self.policy_name = policy
        self.restart_s = restart_s
        self.progress: dict[int, Progress] = {}
        self.trace_of: dict[int, TraceJob] = {}
        self.heap: list[tuple[float, int, int, int]] = []
        self.busy_device_s = 0.0
        self.frag_area = 0.0
        self._seq = 0

    def run(self, jobs: list[TraceJob]) -> Result:
        """Replay ``jobs`` to the end; every job either finishes or is rejected as too big."""
        wall, cpu = time.perf_counter(), time.process_time()
        self._ensure_projects(jobs)
        for index, job in enumerate(jobs):
            self._push(job.arrival, ARRIVE, index)
        rejected, now, last = 0, 0.0, 0.0
        while self.heap:
            now = self.heap[0][0]
            self.frag_area += self.engine.cluster.fragmentation() * (now - last) if last else 0.0
            last = now
            while self.heap and self.heap[0][0] <= now:
                _, _, kind, ref = heapq.heappop(self.heap)
                rejected += self._handle(kind, ref, jobs, now)
            self._consume(self.engine.schedule(now), now)
            self._wake_for_demotion()
            self._wake_for_preferences(now)
        taken = (time.perf_counter() - wall, time.process_time() - cpu)
        return self._result(jobs, rejected, now, *taken)

    # --- events -----------------------------------------------------------------------------

    def _handle(self, kind: int, ref: int, jobs: list[TraceJob], now: float) -> int:
        if kind == ARRIVE:
            trace = jobs[ref]
            try:
                job = self.engine.submit(
                    trace.project,
                    trace.cards,
                    now,
                    trace.job_class,
                    trace.priority,
                    work=trace.duration * trace.cards,
                    allow_mixing=self.mixing != "off",
                )
            except PoolError:
                return 1
            self.trace_of[job.id] = trace
            self.progress[job.id] = Progress(left=trace.duration * trace.cards)
        elif kind == FINISH:
            job = self.engine.jobs[ref]
            progress = self.progress[ref]
            if job.state.value == "running" and progress.finish_at == now:
                self._account(job.id, now)
                self.engine.complete(ref, now)
        return 0

    def _consume(self, events: list[Event], now: float) -> None:
        for event in events:
            if event.job is None:  # a node's event (drained, restored): no job's work
                continue
            if event.kind == "started":
                self._started(event.job, event.detail["devices"], now)
            elif event.kind in ("preempted", "requeued"):
                self._account(event.job, now, stopped=True)

    def _started(self, job_id: int, devices: list[int], now: float) -> None:
        job = self.engine.jobs[job_id]
        progress = self.progress[job_id]
        progress.devices = len(devices)
        progress.rate = self._rate(job, devices)
        progress.since = now + (self.restart_s if progress.started_once is not None else 0.0)
        if progress.started_once is None:
            progress.started_once = now
        progress.finish_at = progress.since + self._eta(job_id)
        self._push(progress.finish_at, FINISH, job_id)

    def _rate(self, job: Job, devices: list[int]) -> float:
        """Reference cards of work per second: each device at its type's speed for the job's
        class; a mixed placement's devices each at their own when balanced, all at the
        slowest one's when the batch is split evenly."""
        relative = self.engine.throughputs.relative
        if MIX not in job.device_type:
            return len(devices) * relative(job.job_class, job.device_type)
        types = [self.engine.cluster.node_of(d).type for d in devices]
        speeds = [relative(job.job_class, t) for t in types]
        if self.mixing == "even":
            return len(speeds) * min(speeds)
        return sum(speeds) * self.balance_efficiency

    def _eta(self, job_id: int) -> float:
        progress = self.progress[job_id]
        return progress.left / progress.rate if progress.rate > 0 else math.inf

    def _account(self, job_id: int, now: float, stopped: bool = False) -> None:
        """Charge device time of the run that ends now; keep the work it did."""
        progress = self.progress[job_id]
        start = progress.since - (self.restart_s if progress.restarts else 0.0)
        self.busy_device_s += progress.devices * max(0.0, now - start)
        done = progress.rate * max(0.0, now - progress.since)
        progress.left = max(0.0, progress.left - done) if stopped else 0.0
        if stopped:
            progress.restarts += 1
            progress.rate = 0.0

    def _wake_for_demotion(self) -> None:
        at = self.engine.next_demotion()
        if at is not None and (not self.heap or at < self.heap[0][0]):
            self._push(at, WAKE, 0)

    def _wake_for_preferences(self, now: float) -> None:
        """Schedule again when the preferences may change their mind (a cheap window opens, a
        deadline nears) while jobs are still waiting or running."""
        prefs = self.engine.preferences
        if prefs is None or not (self.engine.queue or self.engine.running):
            return
        at = prefs.wake_at(now)
        if at is not None and (not self.heap or at < self.heap[0][0]):
            self._push(at, WAKE, 0)

    def _push(self, at: float, kind: int, ref: int) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, kind, ref))

    # --- setup and results ------------------------------------------------------------------

    def _ensure_projects(self, jobs: list[TraceJob]) -> None:
        """Projects the trace names but the cluster file does not: guarantee by demand share."""
        quotas = self.engine.quotas
        demand: dict[str, float] = defaultdict(float)
        for job in jobs:
            if job.project not in quotas.projects:
                demand[job.project] += job.duration * job.cards
        total = sum(demand.values()) or 1.0
        capacity = self.engine.cluster.size
        for name, need in demand.items():
            quotas.upsert(Project(name, guaranteed=int(capacity * need / total)))

    def _result(
        self, jobs: list[TraceJob], rejected: int, end: float, wall: float, cpu: float
    ) -> Result:
        done = [j for j in self.engine.jobs.values() if j.state.value == "done"]
        jct = sorted((j.finished or 0.0) - j.submitted for j in done)
        waits = [(self.progress[j.id].started_once or j.submitted) - j.submitted for j in done]
        span = max(end, 1.0) * self.engine.cluster.size
        return Result(
            policy=self.policy_name,
            mixing=self.mixing,
            jobs=len(jobs),
            finished=len(done),
            rejected=rejected,
            avg_jct_h=sum(jct) / max(1, len(jct)) / 3600,
            p50_jct_h=(jct[(len(jct) - 1) // 2] if jct else 0.0) / 3600,
            p95_jct_h=(jct[int(0.95 * (len(jct) - 1))] if jct else 0.0) / 3600,
            avg_queue_h=sum(waits) / max(1, len(waits)) / 3600,
            utilisation=self.busy_device_s / span,
            preemptions=sum(j.preemptions for j in self.engine.jobs.values()),
            fragmentation=self.frag_area / max(end, 1.0),
            wall_s=wall,
            cpu_s=cpu,
            jct_by_job={j.id: (j.finished or 0.0) - j.submitted for j in done},
        )
