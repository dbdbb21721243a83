"""Placement preferences inside the pool's scheduling pass: the real engine and simulator, real
policy plugins and a price book - cheap windows, deadlines, energy-efficient device types."""

from __future__ import annotations

from typing import Any

import pytest

from xirang_service.cost.errors import CostError
from xirang_service.cost.governor import PoolBudgets
from xirang_service.cost.preferences import CostPreferences
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.pricefile import load_preferences
from xirang_service.pool import clusterfile
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.jobs import PRIORITIES
from xirang_service.pool.policy import load_policy
from xirang_service.pool.service import OPERATOR, PoolService, RecordingExecutor
from xirang_service.pool.sim.simulator import Simulator
from xirang_service.pool.sim.traces import TraceJob
from xirang_service.pool.store import PoolStore

from .pools import Clock

HOUR = 3600.0
MIDNIGHT = 1_700_006_400.0  # 2023-11-15 00:00 UTC
NIGHT = {"name": "offpeak", "start": 22, "end": 6, "multiplier": 0.5}
ONE_TYPE = {
    "groups": [{"type": "gpu", "nodes": 2, "devices": 4}],
    "projects": [{"name": "nlp", "guaranteed": 8}],
}
#: a100 is as good per unit of money as h100 (half the speed at half the price) and draws less
#: energy per unit of work (300 W per unit against 350 W), but h100 is the faster type
TWO_TYPES = {
    "groups": [
        {"type": "a100", "nodes": 1, "devices": 8},
        {"type": "h100", "nodes": 1, "devices": 8},
    ],
    "throughputs": {"reference": "a100", "speed": {"a100": 1.0, "h100": 2.0}},
    "projects": [{"name": "nlp", "guaranteed": 16}],
}
TWO_TYPE_BOOK = PriceBook({"a100": 2.0, "h100": 4.0}, watts={"a100": 300, "h100": 700})


def engine(data: dict[str, Any], prefs: CostPreferences | None, policy: str = "priority"):
    cluster, throughputs, quotas = clusterfile.build(dict(data))
    return PoolEngine(cluster, throughputs, load_policy(policy), quotas, preferences=prefs)


def kinds(events: list, job_id: int) -> list[str]:
    return [e.kind for e in events if e.job == job_id]


def test_interruptible_jobs_run_only_in_the_cheap_window_and_leave_before_it_ends() -> None:
    book = PriceBook.from_settings({"prices": {"gpu": 2.0}, "windows": [NIGHT]})
    pool = engine(ONE_TYPE, CostPreferences.from_settings(book, {"reclaim_lead_min": 30}))
    now = MIDNIGHT + 10 * HOUR
    spot = pool.submit("nlp", 4, now, payload={"interruptible": True})
    normal = pool.submit("nlp", 4, now)
    pool.schedule(now)
    assert (spot.state.value, normal.state.value) == ("queued", "running")

    assert pool.schedule(MIDNIGHT + 22 * HOUR) and spot.state.value == "running"
    assert spot.device_type == "gpu"

    events = pool.schedule(MIDNIGHT + 29 * HOUR)  # 05:00 next day: still cheap
    assert kinds(events, spot.id) == [] and spot.state.value == "running"
    events = pool.schedule(MIDNIGHT + 29.5 * HOUR)  # 05:30: half an hour before 06:00
    preempted = [e for e in events if e.job == spot.id]
    assert [e.kind for e in preempted] == ["preempted"]
    assert "cheap window ends" in preempted[0].detail["reason"]
    assert spot.state.value == "queued" and normal.state.value == "running"
    assert kinds(pool.schedule(MIDNIGHT + 40 * HOUR), spot.id) == []  # 16:00: peak, waits
    assert kinds(pool.schedule(MIDNIGHT + 46 * HOUR), spot.id) == ["started"]  # 22:00 again


def test_non_critical_jobs_are_reclaimed_before_a_deadline_and_critical_work_stays() -> None:
    book = PriceBook({"gpu": 2.0})
    deadline = MIDNIGHT + 12 * HOUR
    prefs = CostPreferences.from_settings(
        book, {"deadlines": ["2023-11-15T12:00:00+00:00"], "reclaim_lead_min": 30}
    )
    assert prefs.deadlines == (deadline,)
    pool = engine(ONE_TYPE, prefs)
    now = MIDNIGHT + 9 * HOUR
    critical = pool.submit("nlp", 2, now, priority=PRIORITIES["critical"])
    normal = pool.submit("nlp", 2, now)
    low = pool.submit("nlp", 2, now, priority=PRIORITIES["low"])
    pool.schedule(now)
    assert {j.state.value for j in (critical, normal, low)} == {"running"}
    assert pool.schedule(deadline - 31 * 60) == []

    events = pool.schedule(deadline - 30 * 60)
    reclaimed = [(e.job, e.kind) for e in events]
    assert reclaimed == [(low.id, "preempted"), (normal.id, "preempted")]  # lowest first
    assert all("deadline" in e.detail["reason"] for e in events)
    assert critical.state.value == "running"
    late = pool.submit("nlp", 2, deadline - 10 * 60)
    pool.schedule(deadline - 10 * 60)
    assert late.state.value == "queued"  # nothing non-critical starts before the deadline

    after = pool.schedule(deadline)
    assert sorted(e.job for e in after if e.kind == "started") == [normal.id, low.id, late.id]


def test_equal_value_per_cost_goes_to_the_energy_efficient_type_in_the_simulator() -> None:
    trace = [TraceJob(arrival=0.0, duration=HOUR, cards=4, project="nlp")]
    plain = Simulator(TWO_TYPES, "priority")
    plain.run(trace)
    assert plain.engine.jobs[1].device_type == "h100"  # the policy alone: fastest first

    preferred = Simulator(TWO_TYPES, "priority", preferences=CostPreferences(TWO_TYPE_BOOK))
    result = preferred.run(trace)
    assert result.finished == 1
    assert preferred.engine.jobs[1].device_type == "a100"


def test_a_better_value_type_wins_over_energy() -> None:
    book = PriceBook({"a100": 2.0, "h100": 3.0}, watts={"a100": 300, "h100": 700})
    pool = engine(TWO_TYPES, CostPreferences(book), policy="hetero")
    job = pool.submit("nlp", 4, MIDNIGHT)
    pool.schedule(MIDNIGHT)
    assert job.device_type == "h100"  # 2/3 per unit of money against a100's 1/2


def test_preferences_say_when_to_schedule_again() -> None:
    """A simulator or service with nothing else to do looks again at these moments."""
    book = PriceBook.from_settings({"prices": {"gpu": 2.0}, "windows": [NIGHT]})
    prefs = CostPreferences(book, deadlines=(MIDNIGHT + 12 * HOUR,), lead_s=1800.0)
    assert prefs.wake_at(MIDNIGHT + 7 * HOUR) == MIDNIGHT + 11.5 * HOUR  # deadline lead
    assert prefs.wake_at(MIDNIGHT + 11.5 * HOUR) == MIDNIGHT + 12 * HOUR  # the deadline
    assert prefs.wake_at(MIDNIGHT + 13 * HOUR) == MIDNIGHT + 22 * HOUR  # the window opens
    assert prefs.wake_at(MIDNIGHT + 23 * HOUR) == MIDNIGHT + 29.5 * HOUR  # lead of its end


PRICE_FILE = """
prices: {gpu: 2.0}
windows: [{name: offpeak, start: 22, end: 6, multiplier: 0.5}]
placement: {reclaim_lead_min: 30}
"""
CLUSTER_FILE = """
groups:
  - {type: gpu, nodes: 2, devices: 4}
projects:
  - {name: nlp, guaranteed: 8}
"""


def test_pool_serve_with_a_price_file_holds_and_reclaims_interruptible_jobs(tmp_path) -> None:
    """What ``xirang pool serve --prices book.yaml`` builds: the service asks the preferences,
    and the executor is told why a reclaimed job stops."""
    (tmp_path / "prices.yaml").write_text(PRICE_FILE)
    (tmp_path / "cluster.yaml").write_text(CLUSTER_FILE)
    clock = Clock(MIDNIGHT + 10 * HOUR)
    executor = RecordingExecutor()
    budgets = PoolBudgets.from_file(tmp_path / "prices.yaml", tmp_path / "cost.db")
    assert budgets.preferences is not None and budgets.preferences.lead_s == 1800.0
    service = PoolService(
        PoolStore(tmp_path / "pool.db"),
        tmp_path / "cluster.yaml",
        executor=executor,
        clock=clock,
        budgets=budgets,
    )
    try:
        body = {"project": "nlp", "cards": 4, "payload": {"interruptible": True}}
        job = service.submit(OPERATOR, body)
        assert job["state"] == "queued" and executor.started == []
        clock.now = MIDNIGHT + 22 * HOUR
        service.tick()
        assert service.job(OPERATOR, job["id"])["state"] == "running"
        clock.now = MIDNIGHT + 29.5 * HOUR
        service.tick()
        assert service.job(OPERATOR, job["id"])["state"] == "queued"
        assert executor.stopped == [job["id"]]
    finally:
        service.store.close()
        budgets.close()


def test_a_bad_placement_section_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "prices.yaml").write_text(PRICE_FILE.replace("reclaim_lead_min", "lead"))
    with pytest.raises(CostError, match=r"placement\.lead is unknown; valid: deadlines"):
        load_preferences(tmp_path / "prices.yaml")
    book = PriceBook({"gpu": 1.0})
    with pytest.raises(CostError, match="ISO time"):
        CostPreferences.from_settings(book, {"deadlines": ["tomorrow"]})
