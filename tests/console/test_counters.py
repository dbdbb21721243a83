"""Prometheus counters never go down: a charge ageing out of the console's 30-day window
lowers the 30-day gauges, never a ``_total`` counter (``rate()`` would read a reset)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.console.conftest import HOUR
from xirang_service.console.auth import OPERATOR
from xirang_service.console.prometheus import exposition
from xirang_service.console.source import COST_WINDOW_S
from xirang_service.cost.charges import Charge

DAY = 24 * HOUR


def scrape(source, who: str = OPERATOR) -> dict[tuple[str, str, tuple], float]:
    """``(family type, sample name, labels) -> value`` of one scrape, parsed by
    prometheus_client's own parser."""
    text = exposition(source, who)
    return {
        (family.type, s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_charge_ageing_out_never_lowers_a_counter(console) -> None:
    source, now = console.source, console.pool.clock.now
    old = Charge(
        "pool", "old-job@1", "nlp", "research", "a100", 8, now - COST_WINDOW_S + HOUR,
        HOUR, HOUR, 24_000_000, idle_micro=2_000_000,
    )  # fmt: skip
    source.costs.record([old])
    before = scrape(source)
    console.pool.clock.now += 2 * HOUR  # the old charge leaves the 30-day window
    after = scrape(source)

    counters = [k for k in before if k[0] == "counter"]
    assert {k[1] for k in counters} >= {"xirang_cost_total", "xirang_cost_idle_total"}
    for key in counters:
        assert after[key] >= before[key], key
    labels = tuple(
        sorted(dict(team="research", project="nlp", device_type="a100", currency="USD").items())
    )
    gauge = ("gauge", "xirang_cost_30d", labels)
    assert after[gauge] == before[gauge] - 24.0  # the 30-day view did drop
    total = ("counter", "xirang_cost_total", labels)
    assert after[total] == before[total]


def test_a_project_sees_only_its_own_all_time_cost(console) -> None:
    nlp = scrape(console.source, "nlp")
    projects = {dict(k[2]).get("project") for k in nlp if k[1] == "xirang_cost_total"}
    assert projects == {"nlp"}
