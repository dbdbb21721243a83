"""Budgets enforced by the pool service: real pool and cost SQLite stores, a clock moved by
hand, and the recording executor (which notes every start and stop the pool asks for)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xirang_service.cost.budgets import Budget
from xirang_service.cost.errors import CostError
from xirang_service.cost.governor import Governor, PoolBudgets
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR, PoolService, RecordingExecutor
from xirang_service.pool.store import PoolStore

CLUSTER = """
groups:
  - {type: gpu, nodes: 2, devices: 4}
projects:
  - {name: nlp, guaranteed: 4}
  - {name: cv, guaranteed: 4}
"""
#: 3.6 per device-hour, 0.7x inside a guarantee: 4 cards for an hour cost 10.08
BOOK = PriceBook(prices={"gpu": 3.6})
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Pool:
    """A pool service over tmp stores, metering with :data:`BOOK` unless told otherwise."""

    def __init__(self, folder: Path, book: PriceBook | None = BOOK) -> None:
        (folder / "cluster.yaml").write_text(CLUSTER)
        self.clock = Clock()
        self.costs = CostStore(folder / "cost.db")
        self.executor = RecordingExecutor()
        self.budgets = PoolBudgets(Governor(self.costs), Meter(book) if book else None)
        self.service = PoolService(
            PoolStore(folder / "pool.db"),
            folder / "cluster.yaml",
            executor=self.executor,
            clock=self.clock,
            budgets=self.budgets,
        )

    def submit(self, project: str, cards: int = 4, priority: str = "normal") -> dict:
        body = {"project": project, "cards": cards, "priority": priority}
        return self.service.submit(OPERATOR, body)

    def state(self, job: dict) -> str:
        return self.service.job(OPERATOR, job["id"])["state"]

    def close(self) -> None:
        self.service.store.close()
        self.costs.close()


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    p = Pool(tmp_path)
    yield p
    p.close()


def _budget(pool: Pool, amount: float, action: str, scope: str = "project", name: str = "nlp"):
    pool.costs.set_budget(Budget(scope, name, int(amount * 1_000_000), action=action))


def test_the_pool_meters_its_jobs_and_metering_again_does_not_bill_twice(pool: Pool) -> None:
    pool.submit("nlp")
    pool.clock.now += HOUR
    pool.service.tick()
    pool.service.tick()
    assert pool.costs.spent_micro("project", "nlp") == 10_080_000
    assert pool.service.status(OPERATOR)["budgets_metered"] is True


def test_stop_submissions_refuses_new_jobs_with_402_once_metered_over(pool: Pool) -> None:
    _budget(pool, 10.0, "stop_submissions")
    running = pool.submit("nlp")
    pool.submit("nlp", cards=1)  # under budget: admitted
    pool.clock.now += HOUR
    pool.service.tick()
    with pytest.raises(PoolError, match="xirang cost budget set project nlp") as err:
        pool.submit("nlp")
    assert err.value.status == 402
    assert pool.state(running) == "running"  # running jobs continue
    assert pool.submit("cv")["state"] == "running"  # other projects are not touched


def test_lower_priority_queues_new_jobs_at_low(pool: Pool) -> None:
    _budget(pool, 10.0, "lower_priority")
    pool.submit("nlp")
    pool.clock.now += HOUR
    pool.service.tick()
    assert pool.submit("nlp", priority="critical")["priority"] == "low"
    assert pool.submit("cv", priority="critical")["priority"] == "critical"


def test_lower_priority_demotes_the_projects_queued_jobs_too(pool: Pool) -> None:
    _budget(pool, 10.0, "lower_priority")
    pool.submit("nlp")
    pool.submit("cv")  # the pool is full now; 8-card jobs cannot preempt guaranteed work
    queued = pool.submit("nlp", cards=8, priority="high")  # queued while the budget had room
    behind = pool.submit("cv", cards=8)  # normal, queued after it
    assert [j["id"] for j in pool.service.queue(OPERATOR)] == [queued["id"], behind["id"]]
    pool.clock.now += HOUR
    pool.service.tick()
    assert pool.service.job(OPERATOR, queued["id"])["priority"] == "low"
    assert [j["id"] for j in pool.service.queue(OPERATOR)] == [behind["id"], queued["id"]]
    pool.clock.now += 60
    pool.service.tick()  # demoted once, not again at every tick
    events = [e for e in pool.service.store.events() if e["kind"] == "reprioritised"]
    assert [(e["job_id"], e["detail"]["priority"]) for e in events] == [(queued["id"], 0)]
    assert "budget: project 'nlp' spent 101% of its budget" in events[0]["detail"]["reason"]


def test_checkpoint_stop_stops_running_jobs_at_the_next_tick_for_good(pool: Pool) -> None:
    _budget(pool, 10.0, "checkpoint_stop")
    running = pool.submit("nlp")
    waiting = pool.submit("nlp", cards=8)  # queued: the pool has 4 free cards
    other = pool.submit("cv")
    pool.clock.now += HOUR
    pool.service.tick()
    assert pool.executor.stopped == [running["id"]]  # told to stop, as a preemption is
    assert (pool.state(running), pool.state(waiting)) == ("cancelled", "cancelled")
    assert pool.state(other) == "running"
    stops = [e for e in pool.service.store.events() if e["kind"] == "budget_stopped"]
    assert {e["job_id"] for e in stops} == {running["id"], waiting["id"]}
    assert "project 'nlp' spent 101% of its budget" in stops[0]["detail"]["reason"]
    pool.clock.now += HOUR
    pool.service.tick()
    assert pool.executor.started.count(running["id"]) == 1  # never started again


def test_a_job_budget_stops_only_that_job(pool: Pool) -> None:
    first, second = pool.submit("nlp", cards=2), pool.submit("nlp", cards=2)
    _budget(pool, 1.0, "checkpoint_stop", scope="job", name=str(first["id"]))
    pool.clock.now += HOUR
    pool.service.tick()
    assert (pool.state(first), pool.state(second)) == ("cancelled", "running")


def test_without_a_price_book_budgets_act_on_charges_recorded_elsewhere(tmp_path: Path) -> None:
    pool = Pool(tmp_path, book=None)
    try:
        _budget(pool, 10.0, "stop_submissions")
        pool.submit("nlp")
        pool.clock.now += HOUR
        pool.service.tick()
        assert pool.costs.spent_micro("project", "nlp") == 0  # not metered here, and says so
        assert pool.service.status(OPERATOR)["budgets_metered"] is False
        pool.budgets.meter = Meter(BOOK)  # e.g. the console's sampler metering the same pool
        pool.budgets.record(_state(pool), pool.clock.now)
        with pytest.raises(PoolError) as err:
            pool.submit("nlp")
        assert err.value.status == 402
    finally:
        pool.close()


def test_a_price_book_missing_a_pool_device_type_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(CostError, match=r"no price for device type.*gpu"):
        Pool(tmp_path, book=PriceBook(prices={"a100": 2.0}))


def _state(pool: Pool):
    from xirang_service.console.state import read_state

    return read_state(pool.service.store, pool.clock.now, usage=True)
