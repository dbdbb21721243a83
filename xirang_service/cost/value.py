"""Unit output: what a run produced per unit of money, so runs compare by value, not speed."""

from __future__ import annotations

from xirang_service.cost.charges import Charge
from xirang_service.cost.money import MICRO


def per_cost(quantity: float, amount_micro: int) -> float | None:
    """``quantity`` per currency unit of ``amount_micro`` (None when nothing was spent)."""
    return quantity * MICRO / amount_micro if amount_micro else None


def tokens_per_cost(charge: Charge) -> float | None:
    """Training tokens per currency unit."""
    return per_cost(charge.tokens, charge.amount_micro)


def loss_drop_per_cost(charge: Charge) -> float | None:
    """Loss improvement (first minus final loss) per currency unit."""
    return per_cost(charge.loss_drop, charge.amount_micro)
