"""The example cost policy through xirang's test kit (the ``xirang`` fixture)."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1]


@pytest.fixture
def kit(xirang):
    xirang.use("xirang_energy_cost", path=PACKAGE)
    return xirang


def test_the_policy_meets_the_cost_protocol(kit):
    kit.check("cost", "energy")


def test_a_quote_is_watts_times_hours_times_price(kit):
    config = kit.compose("cost=energy", "cost.price_per_kwh=0.5")
    policy = kit.registry.create("cost", config["cost"])
    quote = policy.quote("cpu", 2, 3600.0)
    assert quote.amount == pytest.approx(2 * 150 / 1000 * 0.5)


def test_a_negative_price_is_refused_naming_the_key(kit):
    from xirang import ConfigError

    config = kit.compose("cost=energy", "cost.price_per_kwh=-1")
    with pytest.raises(ConfigError, match=r"cost\.price_per_kwh=-1\.0: must be >= 0"):
        kit.registry.create("cost", config["cost"])
