"""The cost=pricebook|offpeak|energy_aware policies, and runs metered into the cost store."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QUICK, run_dirs
from xirang_core.plugins import get_registry
from xirang_service.cost.errors import CostError
from xirang_service.cost.store import CostStore

HOUR = 3600
SETTINGS = {
    "prices": {"cpu": 1.0, "a100": 4.0},
    "windows": [{"name": "offpeak", "start": 22, "end": 6, "multiplier": 0.5}],
    "watts": {"a100": 500},
    "price_per_kwh": 0.2,
}


def policy(name: str, **extra):
    return get_registry().create("cost", {"name": name, **SETTINGS, **extra})


def test_pricebook_quotes_by_window_and_class():
    book = policy("pricebook")
    assert book.quote("a100", 2, HOUR, end=13 * HOUR).amount == 8.0  # peak, on demand
    assert book.quote("a100", 2, HOUR, end=1 * HOUR).amount == 4.0  # off-peak
    spot = policy("pricebook", capacity_class="spot")
    assert spot.quote("a100", 1, HOUR, end=13 * HOUR).amount == 1.4


def test_offpeak_prices_spot_and_defers_interruptible_jobs():
    offpeak = policy("offpeak")
    assert offpeak.quote("a100", 1, HOUR, end=13 * HOUR).amount == 1.4
    assert offpeak.start_after(12 * HOUR, interruptible=True) == 22 * HOUR
    assert offpeak.start_after(12 * HOUR, interruptible=False) == 12 * HOUR


def test_energy_aware_adds_the_energy_drawn():
    energy = policy("energy_aware")
    assert energy.quote("a100", 1, HOUR, end=13 * HOUR).amount == pytest.approx(4.1)


def test_flat_still_works_and_a_typo_in_the_class_fails_at_once():
    flat = get_registry().create("cost", {"name": "flat", "prices": {"cpu": 0.5}})
    assert flat.quote("cpu", 2, HOUR).amount == 1.0
    with pytest.raises(CostError, match="valid: guaranteed, on_demand, spot"):
        policy("pricebook", capacity_class="reserved")


@pytest.mark.slow
def test_a_training_run_is_priced_by_the_book_and_metered(run_xirang, tmp_path, xirang_home):
    result = run_xirang("cost=energy_aware", "project=costs-e2e", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost"]["policy"] == "energy_aware" and summary["cost"]["amount"] > 0
    assert summary["loss_drop_per_cost"] > 0  # unit output: loss improvement per unit of money
    store = CostStore()
    [charge] = [c for c in store.charges(project="costs-e2e")]
    store.close()
    assert charge.ref == summary["run_dir"] and charge.tokens == summary["tokens"]
    assert charge.amount_micro == round(summary["cost"]["amount"] * 1_000_000)
    report = run_xirang("cost", "report", "--by", "project")
    assert report.returncode == 0 and "costs-e2e" in report.stdout
