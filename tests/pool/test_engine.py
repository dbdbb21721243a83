"""The pool engine under the default policy: quotas, borrowing, reclaim, preemption, drain."""

from __future__ import annotations

import pytest

from tests.pool.conftest import make_engine
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import JobState

TWO = [{"name": "a", "guaranteed": 8}, {"name": "b", "guaranteed": 8}]


def test_idle_capacity_is_borrowed_and_reclaimed_by_its_owner() -> None:
    engine = make_engine(projects=TWO)  # 16 devices, 8 guaranteed to each project
    borrower = engine.submit("a", 16, now=0)
    engine.schedule(0)
    assert borrower.state is JobState.RUNNING and borrower.borrowed
    owner = engine.submit("b", 8, now=10)
    events = engine.schedule(10)
    assert owner.state is JobState.RUNNING and not owner.borrowed
    assert borrower.state is JobState.QUEUED and borrower.preemptions == 1
    assert [e.kind for e in events if e.job == borrower.id] == ["preempted"]


def test_a_guaranteed_share_is_never_preempted_by_another_project() -> None:
    engine = make_engine(projects=TWO)
    inside = engine.submit("a", 8, now=0)
    engine.schedule(0)
    assert not inside.borrowed
    urgent = engine.submit("b", 16, now=1, priority=3)  # critical, but only 8 devices idle
    engine.schedule(1)
    assert inside.state is JobState.RUNNING
    assert urgent.state is JobState.QUEUED


def test_higher_priority_preempts_borrowed_capacity() -> None:
    engine = make_engine(projects=[{"name": "a", "guaranteed": 0}, {"name": "b", "guaranteed": 0}])
    low = engine.submit("a", 16, now=0, priority=0)
    engine.schedule(0)
    high = engine.submit("b", 4, now=5, priority=2)
    engine.schedule(5)
    assert high.state is JobState.RUNNING and low.state is JobState.QUEUED


def test_least_attained_service_goes_first_within_a_class() -> None:
    engine = make_engine(las_thresholds=(1.0,), preempt_grace_s=0)
    old = engine.submit("a", 16, now=0)
    engine.schedule(0)
    newcomer = engine.submit("a", 4, now=7200)  # old has 32 card-hours of service by now
    engine.schedule(7200)
    assert newcomer.state is JobState.RUNNING
    assert old.state is JobState.QUEUED and old.attained == pytest.approx(16 * 7200)


def test_borrowing_limit_caps_usage_beyond_the_guarantee() -> None:
    engine = make_engine(projects=[{"name": "a", "guaranteed": 4, "borrow_limit": 4}])
    first = engine.submit("a", 8, now=0)
    engine.schedule(0)
    second = engine.submit("a", 4, now=1)
    engine.schedule(1)
    assert first.state is JobState.RUNNING and first.borrowed
    assert second.state is JobState.QUEUED  # 8 used = 4 guaranteed + 4 borrowed: at the limit


def test_drained_node_requeues_its_jobs_and_takes_no_more() -> None:
    engine = make_engine()
    job = engine.submit("a", 4, now=0)
    engine.schedule(0)
    node = engine.cluster.node_of(job.devices[0]).name
    engine.drain(node, now=1)
    assert job.state is JobState.QUEUED and job.requeues == 1
    engine.schedule(1)
    assert job.state is JobState.RUNNING
    assert all(engine.cluster.node_of(d).name != node for d in job.devices)


def test_fifo_blocks_behind_the_head_and_priority_backfills() -> None:
    for policy, small_runs in (("fifo", False), ("priority", True)):
        engine = make_engine(policy)
        engine.submit("a", 12, now=0)
        engine.schedule(0)
        engine.submit("a", 8, now=1)  # does not fit: 4 free
        small = engine.submit("a", 2, now=2)
        engine.schedule(2)
        assert (small.state is JobState.RUNNING) is small_runs, policy


def test_bad_requests_are_clear_errors() -> None:
    engine = make_engine()
    with pytest.raises(PoolError, match="unknown project 'zz'"):
        engine.submit("zz", 1, now=0)
    with pytest.raises(PoolError, match="between 1 and"):
        engine.submit("a", 0, now=0)
    with pytest.raises(PoolError, match="can never fit"):
        engine.submit("a", 64, now=0)
    with pytest.raises(PoolError, match="no job 99"):
        engine.cancel(99, now=0)


def test_demotion_at_a_large_clock_value_ends() -> None:
    """At t=1e7 s, 7 cards reach 1 card-hour a float rounding short of it: the job must still
    drop a level, not be demoted again at the same instant forever (the full Philly replay)."""
    engine = make_engine(nodes=2, devices=4, las_thresholds=(1.0, 8.0))
    job = engine.submit("a", 7, 1.0e7)
    engine.schedule(1.0e7)
    at = engine.next_demotion()
    assert at is not None
    engine.schedule(at)  # returned at all: the demotion was applied once
    assert engine.policy.level(3600.0) == 1 and engine._keys[job.id][1] == 1
    assert (engine.next_demotion() or 0.0) > at
