"""Prices by device type, time window and capacity class; exact charges."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_service.cost.errors import CostError
from xirang_service.cost.pricebook import PriceBook

HOUR = 3600
OFFPEAK = {"name": "offpeak", "start": 22, "end": 6, "multiplier": 0.5}


def book(**extra) -> PriceBook:
    return PriceBook.from_settings(
        {"prices": {"a100": 4.0, "v100": 1.0}, "windows": [OFFPEAK], **extra}
    )


def test_a_span_across_midnight_is_priced_per_window():
    pieces = book().charge("a100", 2, 21 * HOUR, 3 * HOUR)  # 21:00-24:00
    assert [(p.window, p.seconds) for p in pieces] == [("peak", HOUR), ("offpeak", 2 * HOUR)]
    assert sum(p.amount for p in pieces) == 2 * 4 * 1 + 2 * 2 * 2  # 8 peak + 8 off-peak


def test_capacity_classes_and_energy_change_the_price():
    b = book(watts={"a100": 500}, price_per_kwh=0.2)
    noon = 12 * HOUR
    assert b.charge_micro("a100", 1, noon, HOUR, "spot") == 1_400_000  # 4 x 0.35
    assert b.charge_micro("a100", 1, noon, HOUR, "guaranteed") == 2_800_000
    assert b.charge_micro("a100", 1, noon, HOUR, energy=True) == 4_100_000  # + 0.5 kWh x 0.2
    assert b.energy_wh("a100", 2, HOUR) == 1000


def test_the_utc_offset_moves_the_windows():
    shifted = book(utc_offset_h=2)  # 20:00 UTC is 22:00 local: off-peak
    assert shifted.window_at(20 * HOUR).name == "offpeak"
    assert book().window_at(20 * HOUR) is None


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"prices": {"a100": -1}}, "prices"),
        ({"prices": {"a100": 1}, "windows": [{"name": "x", "start": 25, "end": 2}]}, "0-23"),
        ({"prices": {"a100": 1}, "windows": ["night"]}, "expected {name"),
        ({"prices": {"a100": 1}, "price_per_kwh": -0.1}, "price_per_kwh"),
    ],
)
def test_bad_price_books_are_refused_with_the_key_named(settings, words):
    with pytest.raises(CostError, match=words):
        PriceBook.from_settings(settings)


def test_unknown_device_type_or_class_names_the_valid_ones():
    with pytest.raises(CostError, match="a100, v100"):
        book().charge("tpu", 1, 0, HOUR)
    with pytest.raises(CostError, match="spot"):
        book().charge("a100", 1, 0, HOUR, "reserved")


@settings(deadline=None)  # shared CI cores: no per-example time limit
@given(
    start=st.integers(0, 10**9),
    first=st.integers(0, 5 * 10**5),
    second=st.integers(0, 5 * 10**5),
    devices=st.integers(0, 64),
)
def test_pricing_in_pieces_equals_pricing_at_once(start, first, second, devices):
    """Cutting a span anywhere never changes its exact price (no drift at window edges);
    whole seconds keep the float arithmetic of the cut itself exact."""
    b = book()

    def exact(s, n):
        return sum((p.amount for p in b.charge("a100", devices, s, n)), Fraction(0))

    whole = exact(start, first + second)
    assert exact(start, first) + exact(start + first, second) == whole
