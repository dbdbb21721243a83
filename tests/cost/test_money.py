"""Money in micro-units: conversions and exact splitting."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_service.cost.money import format_money, from_micro, split_exact, to_micro


def test_amounts_convert_without_float_drift():
    assert to_micro("0.1") + to_micro("0.2") == to_micro("0.3")
    assert to_micro(2.5) == 2_500_000
    assert from_micro(1_234_567) == Decimal("1.234567")
    assert format_money(1_234_567_890) == "1,234.57"


@settings(deadline=None)  # shared CI cores: no per-example time limit
@given(
    total=st.integers(0, 10**15),
    weights=st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 10**9), min_size=1),
)
def test_split_hands_out_every_micro_unit_exactly_once(total, weights):
    if not any(w > 0 for w in weights.values()):
        with pytest.raises(ValueError):
            split_exact(total, weights)
        return
    parts = split_exact(total, weights)
    assert sum(parts.values()) == total
    assert set(parts) == set(weights)
    weight_sum = sum(weights.values())
    for key, weight in weights.items():  # nobody is more than one micro-unit off their share
        assert abs(parts[key] - total * weight / weight_sum) < 1 + 1e-6 * total
