"""A run's cost in its summary: the amount its cost policy quoted, and what the run produced per
unit of it; and where a finished run leaves its charge for the cost store. The one cost figure
a training run writes; the pool service's metering restates it for pool jobs
(``xirang_service.cost.run_cost``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xirang_core.paths import xirang_home


def pending_charges() -> Path:
    """Where a finished run leaves what its charge needs (one JSON file per run), for the cost
    store to record when it next opens: a training run never imports the pool service."""
    return xirang_home() / "cost" / "pending"


def cost_fields(
    tokens: int, loss_drop: float, amount: float, currency: str, policy: str
) -> dict[str, Any]:
    """The summary's ``cost`` and its per-cost figures (None when nothing was spent)."""
    return {
        "cost": {"amount": amount, "currency": currency, "policy": policy},
        "tokens_per_cost": round(tokens / amount, 1) if amount else None,
        "loss_drop_per_cost": round(loss_drop / amount, 4) if amount else None,
    }
