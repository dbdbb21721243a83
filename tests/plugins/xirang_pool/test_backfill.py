"""``pool-fifo-backfill``: arrival order with EASY backfill, the scheduling baseline."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pool.conftest import make_engine
from xirang_service.pool.jobs import JobState
from xirang_service.pool.sim.simulator import Simulator
from xirang_service.pool.sim.traces import TraceJob


def test_backfills_only_what_leaves_the_head_reservation_intact() -> None:
    engine = make_engine("fifo-backfill")  # 16 devices
    engine.submit("a", 12, now=0, work=12 * 1000.0)  # ends at t=1000
    engine.schedule(0)
    head = engine.submit("a", 14, now=1, work=14 * 100.0)  # waits: 4 free; at 1000, 2 spare
    long_wide = engine.submit("a", 4, now=1, work=4 * 5000.0)  # would hold 4 past t=1000
    short = engine.submit("a", 3, now=1, work=3 * 500.0)  # ends at 501, before the shadow
    unknown = engine.submit("a", 1, now=1)  # no estimate: one of the 2 spare devices
    engine.schedule(1)
    reservation = engine.policy.reservation(engine, 1)
    assert (reservation.job, reservation.shadow, reservation.extra) == (head.id, 1000.0, 1)
    assert head.state is JobState.QUEUED and long_wide.state is JobState.QUEUED
    assert short.state is JobState.RUNNING and unknown.state is JobState.RUNNING


def test_strict_fifo_backfills_nothing_behind_the_head() -> None:
    engine = make_engine("fifo")
    engine.submit("a", 12, now=0, work=12 * 1000.0)
    engine.schedule(0)
    engine.submit("a", 14, now=1, work=14 * 100.0)
    short = engine.submit("a", 3, now=1, work=3 * 500.0)
    engine.schedule(1)
    assert short.state is JobState.QUEUED


def _cluster() -> dict:
    return {
        "groups": [
            {"type": "fast", "nodes": 2, "devices": 4},
            {"type": "slow", "nodes": 2, "devices": 4},
        ],
        "throughputs": {"reference": "fast", "speed": {"fast": 1.0, "slow": 0.5}},
    }


jobs = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(1, 3000), st.sampled_from((1, 2, 3, 4, 6, 8))),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(jobs)
def test_no_backfilled_job_delays_the_head_reservation(rows: list[tuple[int, int, int]]) -> None:
    """Every reservation the policy makes for a job waiting at the head is kept: with exact
    run-time estimates, the job starts no later than any shadow time it was promised."""
    trace = [
        TraceJob(float(a), float(d), c, project)
        for (a, d, c), project in zip(sorted(rows), ("p", "q") * len(rows), strict=False)
    ]
    sim = Simulator(_cluster(), "fifo-backfill", restart_s=0.0)
    policy, promised = sim.engine.policy, {}
    reserve = policy._reserve

    def recording(head, engine, now):
        reservation = reserve(head, engine, now)
        if reservation is not None:
            promised[head.id] = min(promised.get(head.id, math.inf), reservation.shadow)
        return reservation

    policy._reserve = recording
    result = sim.run(trace)
    assert result.finished == len(trace)
    for job_id, shadow in promised.items():
        assert sim.progress[job_id].started_once <= shadow + 1e-6, (job_id, shadow)
