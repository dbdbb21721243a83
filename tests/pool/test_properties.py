"""Stateful property test of the engine: random submits, cancels, completions, node failures and
quota edits never give a device twice, never lose a job, always requeue preempted jobs, and never
let others keep a project's guaranteed share from it."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.pool.conftest import make_engine
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import JobState
from xirang_service.pool.quota import Project

PROJECTS = ("a", "b", "c")
NODES, DEVICES = 4, 4
CAPACITY = NODES * DEVICES


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        projects = [{"name": p, "guaranteed": g} for p, g in zip(PROJECTS, (6, 4, 0), strict=True)]
        self.engine = make_engine(
            "priority",
            nodes=NODES,
            devices=DEVICES,
            projects=projects,
            preempt_grace_s=0,
            las_thresholds=(0.5,),
        )
        self.engine.max_scan = self.engine.preempt_scan = 10_000
        self.engine.max_victims = self.engine.patience = 10_000
        self.now = 0.0
        self.submitted: set[int] = set()
        self.preempted: set[int] = set()

    # --- rules ------------------------------------------------------------------------------

    @rule(project=st.sampled_from(PROJECTS), cards=st.integers(1, 12), priority=st.integers(0, 3))
    def submit(self, project: str, cards: int, priority: int) -> None:
        job = self.engine.submit(project, cards, self.now, priority=priority)
        self.submitted.add(job.id)
        self._schedule()

    @precondition(lambda self: self.submitted)
    @rule(pick=st.integers(0, 10_000))
    def cancel(self, pick: int) -> None:
        job_id = sorted(self.submitted)[pick % len(self.submitted)]
        try:
            self.engine.cancel(job_id, self.now)
        except PoolError:
            assert self.engine.jobs[job_id].state.finished
        self._schedule()

    @precondition(lambda self: any(True for _ in self.engine.running))
    @rule(pick=st.integers(0, 10_000), ok=st.booleans())
    def complete(self, pick: int, ok: bool) -> None:
        running = [j.id for j in self.engine.running_jobs()]
        self.engine.complete(running[pick % len(running)], self.now, ok)
        self._schedule()

    @rule(node=st.integers(0, NODES - 1), healthy=st.booleans())
    def node_health(self, node: int, healthy: bool) -> None:
        name = self.engine.cluster.nodes[node].name
        if healthy:
            self.engine.undrain(name, self.now)
        elif self.engine.cluster.nodes[node].healthy:
            self.engine.drain(name, self.now)
        self._schedule()

    @rule(project=st.sampled_from(PROJECTS), guaranteed=st.integers(0, CAPACITY))
    def edit_quota(self, project: str, guaranteed: int) -> None:
        others = sum(
            p.guaranteed for p in self.engine.quotas.projects.values() if p.name != project
        )
        guaranteed = min(guaranteed, CAPACITY - others)  # the operator never oversubscribes
        old = self.engine.quotas.projects[project]
        self.engine.set_quota(Project(project, guaranteed, old.borrow_limit, old.team))
        self._schedule()

    @rule(hours=st.floats(0.1, 2.0))
    def time_passes(self, hours: float) -> None:
        self.now += hours * 3600
        self._schedule()

    def _schedule(self) -> None:
        """Passes until nothing changes (a reclaim may need the pass after a borrow)."""
        for _ in range(50):
            events = self.engine.schedule(self.now)
            self.preempted |= {e.job for e in events if e.kind in ("preempted", "requeued")}
            if not events:
                return
        raise AssertionError("the scheduler did not settle within 50 passes")

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def no_device_given_twice(self) -> None:
        held = [d for j in self.engine.running_jobs() for d in j.devices]
        assert len(held) == len(set(held))
        free = {d for n in self.engine.cluster.nodes for d in n.free}
        assert not free & set(held)
        assert len(free) + len(held) == self.engine.cluster.size
        cluster = self.engine.cluster
        healthy_free = sum(len(n.free) for n in cluster.nodes if n.healthy)
        assert cluster.free_devices() == healthy_free
        assert cluster.stranded == sum(cluster._stranded(n) for n in cluster.nodes)

    @invariant()
    def no_job_lost(self) -> None:
        queued = {j.id for j in self.engine.queued_jobs()}
        running = {j.id for j in self.engine.running_jobs()}
        for job_id in self.submitted:
            job = self.engine.jobs[job_id]
            expected = {JobState.QUEUED: queued, JobState.RUNNING: running}.get(job.state)
            assert expected is None or job_id in expected
            assert job.state.finished or job_id in queued | running

    @invariant()
    def preempted_jobs_are_requeued(self) -> None:
        for job_id in self.preempted:
            job = self.engine.jobs[job_id]
            assert job.state.finished or job.state in (JobState.QUEUED, JobState.RUNNING)

    @invariant()
    def guaranteed_share_is_never_kept_by_others(self) -> None:
        engine, quotas = self.engine, self.engine.quotas
        for name, project in quotas.projects.items():
            assert quotas.guaranteed_in_use(name) <= project.guaranteed
        for job in engine.queued_jobs():
            if not quotas.within_guarantee(job):
                continue
            for device_type in engine.cluster.types:
                need = engine.throughputs.devices_for(job.job_class, job.cards, device_type)
                reclaimable = sum(
                    sum(1 for d in j.devices if engine.cluster.node_of(d).healthy)
                    for j in engine.running_jobs()
                    if j.borrowed and j.project != job.project and j.device_type == device_type
                )
                assert need is None or engine.cluster.type_free[device_type] + reclaimable < need


PoolMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestPool = PoolMachine.TestCase
