"""Placement preferences: cheap windows, value per cost with energy as tie-break, deadlines."""

from types import SimpleNamespace

from xirang_service.cost.placement import cheap_start, rank_device_types, reclaim_before
from xirang_service.cost.pricebook import PriceBook

HOUR = 3600
NIGHT = {"name": "offpeak", "start": 22, "end": 6, "multiplier": 0.5}


def test_interruptible_work_waits_for_the_cheapest_window():
    book = PriceBook.from_settings({"prices": {"a100": 1.0}, "windows": [NIGHT]})
    assert cheap_start(book, 10 * HOUR + 120) == 22 * HOUR
    assert cheap_start(book, 23 * HOUR) == 23 * HOUR  # already cheap: start now


def test_types_rank_by_throughput_per_cost_and_energy_breaks_ties():
    book = PriceBook(
        {"a100": 2.0, "h100": 4.0, "v100": 1.0}, watts={"a100": 400, "h100": 700, "v100": 300}
    )
    # a100 and h100 give the same throughput per cost (1.0 per unit of money); h100 draws 175 W
    # per unit of throughput, a100 200 W, so h100 comes first; v100 gives half the value
    ranked = rank_device_types(book, {"a100": 2.0, "h100": 4.0, "v100": 0.5, "tpu": 9.0})
    assert ranked == ["h100", "a100", "v100"]  # unpriced tpu is never preferred


def test_non_critical_jobs_are_reclaimed_before_a_deadline():
    jobs = [
        SimpleNamespace(id=1, priority=3, started=0.0),
        SimpleNamespace(id=2, priority=0, started=10.0),
        SimpleNamespace(id=3, priority=1, started=5.0),
        SimpleNamespace(id=4, priority=0, started=20.0),
    ]
    assert reclaim_before(jobs, deadline=10_000, now=0) == []
    assert [j.id for j in reclaim_before(jobs, deadline=10_000, now=9_000)] == [4, 2, 3]
