"""The price book: what one device-hour costs, by device type, time window and capacity class.

A device type has a base price per device-hour (the on-demand price) and a power draw in watts.
*Windows* scale the price by hour of day (``offpeak`` 22:00-06:00 at 0.6x, say); hours no window
covers are ``peak`` at the base price. *Capacity classes* scale it by how the capacity is held:
``guaranteed`` (reserved, cheaper per hour but paid), ``on_demand`` (1.0) and ``spot``
(preemptible, cheapest). Energy can be priced on top (watts x hours x price per kWh).

Charges are computed exactly: a span of time is cut at window boundaries, each piece priced as a
:class:`~fractions.Fraction`, and the sum rounded to micro-units once, so pricing a run in one
piece or in many gives the same amount to the micro-unit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from xirang_service.cost.errors import CostError
from xirang_service.cost.money import to_micro

#: default price multipliers per capacity class
DEFAULT_CLASSES: dict[str, float] = {"guaranteed": 0.7, "on_demand": 1.0, "spot": 0.35}
PEAK = "peak"
HOUR = 3600


@dataclass(frozen=True)
class Window:
    """Hours ``[start, end)`` of the day (wrapping past midnight when end <= start)."""

    name: str
    start: int
    end: int
    multiplier: float

    def covers(self, hour: int) -> bool:
        if self.start < self.end:
            return self.start <= hour < self.end
        return hour >= self.start or hour < self.end


@dataclass(frozen=True)
class Piece:
    """One stretch of a charge inside a single window."""

    window: str
    seconds: float
    amount: Fraction


@dataclass
class PriceBook:
    """Prices per device-hour by type, with windows, capacity classes and energy."""

    prices: Mapping[str, float]
    currency: str = "USD"
    classes: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    windows: Sequence[Window] = ()
    watts: Mapping[str, float] = field(default_factory=dict)
    price_per_kwh: float = 0.0
    utc_offset_h: int = 0

    def __post_init__(self) -> None:
        self.prices = dict(self.prices)
        self.classes = {**DEFAULT_CLASSES, **dict(self.classes)}
        self.watts = dict(self.watts)
        _check_non_negative("prices", self.prices)
        _check_non_negative("classes", self.classes)
        _check_non_negative("watts", self.watts)
        if self.price_per_kwh < 0:
            raise CostError(f"cost.price_per_kwh={self.price_per_kwh}: must be >= 0")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> PriceBook:
        """A price book from config data (``windows`` as a list of mappings)."""
        values = dict(settings)
        values["windows"] = tuple(parse_window(w) for w in values.get("windows") or ())
        return cls(**values)

    # --- prices -----------------------------------------------------------------------------

    def hourly(self, device_type: str, capacity_class: str = "on_demand") -> float:
        """Price of one device-hour at peak in ``capacity_class`` (no window, no energy)."""
        return self._base(device_type) * self.class_multiplier(capacity_class)

    def window_at(self, epoch_s: float) -> Window | None:
        hour = int((epoch_s // HOUR + self.utc_offset_h) % 24)
        return next((w for w in self.windows if w.covers(hour)), None)

    def energy_price(self, device_type: str) -> float:
        """Energy cost of one device-hour (watts at load x price per kWh)."""
        return self.watts.get(device_type, 0.0) / 1000 * self.price_per_kwh

    def energy_wh(self, device_type: str, devices: int, seconds: float) -> float:
        return self.watts.get(device_type, 0.0) * devices * seconds / HOUR

    def charge(
        self,
        device_type: str,
        devices: int,
        start: float,
        seconds: float,
        capacity_class: str = "on_demand",
        energy: bool = False,
    ) -> list[Piece]:
        """Price ``devices`` x ``seconds`` from ``start`` (epoch s), one piece per window."""
        if devices < 0 or seconds < 0:
            raise CostError(f"cannot price {devices} devices for {seconds} s: both must be >= 0")
        base = Fraction(self._base(device_type)) * Fraction(self.class_multiplier(capacity_class))
        power = Fraction(self.energy_price(device_type)) if energy else Fraction(0)
        pieces: list[Piece] = []
        for window, span in self._spans(start, seconds):
            rate = base * Fraction(window.multiplier if window else 1.0) + power
            amount = rate * devices * Fraction(span) / HOUR
            pieces.append(Piece(window.name if window else PEAK, span, amount))
        return pieces

    def charge_micro(self, *args: Any, **kwargs: Any) -> int:
        """:meth:`charge` summed and rounded once to micro-units."""
        return to_micro(sum((p.amount for p in self.charge(*args, **kwargs)), Fraction(0)))

    def cheapest_multiplier(self) -> float:
        return min([1.0, *(w.multiplier for w in self.windows)])

    # --- helpers ----------------------------------------------------------------------------

    def _spans(self, start: float, seconds: float) -> Iterator[tuple[Window | None, float]]:
        """Cut ``[start, start+seconds)`` at hour boundaries where the window changes."""
        end, t = start + seconds, start
        while t < end:
            window = self.window_at(t)
            cut = (math.floor(t / HOUR) + 1) * HOUR
            while cut < end and self.window_at(cut) == window:
                cut += HOUR
            step_end = min(cut, end)
            yield window, step_end - t
            t = step_end

    def _base(self, device_type: str) -> float:
        if device_type not in self.prices:
            raise CostError(
                f"cost.prices has no price for device type '{device_type}'; priced types: "
                f"{', '.join(sorted(self.prices)) or 'none'}; set cost.prices.{device_type}=<price>"
            )
        return float(self.prices[device_type])

    def class_multiplier(self, capacity_class: str) -> float:
        if capacity_class not in self.classes:
            raise CostError(
                f"capacity class '{capacity_class}' is unknown; valid: {', '.join(self.classes)}"
            )
        return float(self.classes[capacity_class])


def parse_window(value: Any) -> Window:
    """A window from ``{name, start, end, multiplier}``; hours 0-23, multiplier >= 0."""
    if isinstance(value, Window):
        return value
    if not isinstance(value, Mapping) or not {"name", "start", "end"} <= set(value):
        raise CostError(
            f"cost.windows entry {value!r}: expected {{name, start, end, multiplier}} "
            "with hours 0-23, e.g. {name: offpeak, start: 22, end: 6, multiplier: 0.6}"
        )
    start, end = int(value["start"]), int(value["end"])
    multiplier = float(value.get("multiplier", 1.0))
    if not (0 <= start <= 23 and 0 <= end <= 23) or multiplier < 0:
        raise CostError(f"cost.windows '{value['name']}': hours must be 0-23, multiplier >= 0")
    return Window(str(value["name"]), start, end, multiplier)


def _check_non_negative(key: str, values: Mapping[str, float]) -> None:
    negative = {k: v for k, v in values.items() if v < 0}
    if negative:
        raise CostError(f"cost.{key}: values must be >= 0, got {negative}")
