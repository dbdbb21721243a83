"""Cost policies quoting from a :class:`~xirang_service.cost.pricebook.PriceBook`.

``quote`` prices a span that ends now (a run's summary quotes its wall time just after it
ended), so window boundaries crossed during the run are priced piece by piece.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xirang.cost import DEFAULT_CLASSES, PriceBook, cheap_start, from_micro, rank_device_types
from xirang.specs import CostQuote


@dataclass
class PriceBookConfig:
    currency: str = "USD"
    prices: dict[str, float] = field(default_factory=dict)
    classes: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    windows: list[Any] = field(default_factory=list)
    watts: dict[str, float] = field(default_factory=dict)
    price_per_kwh: float = 0.0
    utc_offset_h: int = 0
    capacity_class: str = "on_demand"


class PriceBookPolicy:
    """Device-hours priced by type, window and capacity class."""

    energy = False

    def __init__(self, capacity_class: str = "on_demand", **book: Any) -> None:
        self.book = PriceBook.from_settings(book)
        self.book.class_multiplier(capacity_class)  # a typo fails now, not after the run
        self.capacity_class = capacity_class

    @property
    def currency(self) -> str:
        return self.book.currency

    def quote(
        self, device_type: str, devices: int, seconds: float, end: float | None = None
    ) -> CostQuote:
        """The price of ``devices`` x ``seconds`` ending at ``end`` (default: now)."""
        start = (time.time() if end is None else end) - seconds
        micro = self.book.charge_micro(
            device_type, devices, start, seconds, self.capacity_class, self.energy
        )
        return CostQuote(device_type, devices, seconds, float(from_micro(micro)), self.currency)

    def preferred_types(self, throughputs: Mapping[str, float]) -> list[str]:
        """Device types for a job, best throughput per cost first."""
        return rank_device_types(self.book, throughputs, self.capacity_class)

    def start_after(self, now: float, interruptible: bool) -> float:
        """When a job should start: now, unless it is interruptible and a cheaper window comes."""
        return now


class OffPeakPolicy(PriceBookPolicy):
    """Price book on spot capacity; interruptible experiments wait for the cheapest window."""

    def __init__(self, capacity_class: str = "spot", **book: Any) -> None:
        super().__init__(capacity_class, **book)

    def start_after(self, now: float, interruptible: bool) -> float:
        return cheap_start(self.book, now) if interruptible else now


class EnergyAwarePolicy(PriceBookPolicy):
    """Price book plus the energy drawn; equal value per cost goes to the efficient type."""

    energy = True
