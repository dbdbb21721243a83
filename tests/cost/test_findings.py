"""Findings: low utilisation and allocations left idle after their run ended, with their cost."""

from tests.cost.conftest import charge
from xirang_service.cost.findings import find

HOUR = 3600


def test_low_utilisation_holders_are_found_with_their_idle_cost():
    low = charge(ref="low", held_s=5 * HOUR, busy_s=HOUR, utilisation=0.2, idle_micro=8_000_000)
    busy = charge(ref="busy", held_s=5 * HOUR, utilisation=0.9)
    short = charge(ref="short", held_s=600, utilisation=0.1)
    [finding] = find([low, busy, short])
    assert (finding.kind, finding.ref, finding.cost_micro) == ("low_utilisation", "low", 8_000_000)
    assert "20%" in finding.detail


def test_devices_held_after_the_run_ended_are_found_and_priced():
    held = charge(ref="held", held_s=4 * HOUR, idle_after_s=HOUR, amount_micro=4_000_000)
    [finding] = find([held])
    assert finding.kind == "idle_after_end"
    assert (finding.cost_micro, finding.seconds) == (1_000_000, HOUR)


def test_findings_are_costliest_first():
    a = charge(ref="a", held_s=2 * HOUR, idle_after_s=HOUR, amount_micro=2_000_000)
    b = charge(ref="b", held_s=2 * HOUR, idle_after_s=HOUR, amount_micro=9_000_000)
    assert [f.ref for f in find([a, b])] == ["b", "a"]
