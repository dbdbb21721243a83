"""Money as integer micro-units, so sums never drift.

Every metered amount is stored as an integer number of millionths of the currency unit. Sums of
integers are exact, so a report's rows always add up to its total; conversion to a decimal string
happens only at the edge (tables, CSV, the console). Splitting one amount over several parties
uses the largest-remainder method, which hands out every micro-unit exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

#: micro-units per currency unit
MICRO = 1_000_000


def to_micro(value: float | int | str | Decimal | Fraction) -> int:
    """Round an amount in currency units to whole micro-units (half to even, no float drift)."""
    exact = Fraction(Decimal(value)) if isinstance(value, str) else Fraction(value)
    return round(exact * MICRO)


def from_micro(micro: int) -> Decimal:
    """The decimal amount of ``micro`` micro-units, exact (six decimal places)."""
    return (Decimal(micro) / MICRO).quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)


def format_money(micro: int, places: int = 2) -> str:
    """A human figure (two decimals by default); reports keep the exact value in their CSV."""
    step = Decimal(1).scaleb(-places)
    return f"{from_micro(micro).quantize(step, rounding=ROUND_HALF_EVEN):,}"


def split_exact(total: int, weights: Mapping[str, float | int]) -> dict[str, int]:
    """Split ``total`` micro-units over ``weights`` so the parts sum to ``total`` exactly.

    Largest remainder: each key gets the floor of its exact share, then the micro-units left
    go to the largest fractional remainders (ties by key, so the result is deterministic). With
    no positive weight everything goes to no one, which a caller must handle: it raises.
    """
    positive = {k: Fraction(w) for k, w in weights.items() if w > 0}
    weight_sum = sum(positive.values())
    if not positive or weight_sum <= 0:
        raise ValueError("split_exact needs at least one positive weight")
    shares = {k: Fraction(total) * w / weight_sum for k, w in positive.items()}
    parts = {k: int(s // 1) for k, s in shares.items()}
    left = total - sum(parts.values())
    by_remainder = sorted(shares, key=lambda k: (-(shares[k] - parts[k]), k))
    for key in by_remainder[:left]:
        parts[key] += 1
    return {k: parts.get(k, 0) for k in weights}
