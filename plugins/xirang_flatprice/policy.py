"""Charge device-seconds times a fixed hourly price."""

from __future__ import annotations

from dataclasses import dataclass, field

from xirang import ConfigError
from xirang.specs import CostQuote


@dataclass
class FlatPriceConfig:
    currency: str = "USD"
    prices: dict[str, float] = field(default_factory=dict)


class FlatPrice:
    def __init__(self, currency: str = "USD", prices: dict[str, float] | None = None) -> None:
        self.currency = currency
        self.prices = dict(prices or {})
        negative = {k: v for k, v in self.prices.items() if v < 0}
        if negative:
            raise ConfigError(f"cost.prices: prices must be >= 0, got {negative}")

    def quote(self, device_type: str, devices: int, seconds: float) -> CostQuote:
        if device_type not in self.prices:
            raise ConfigError(
                f"cost.prices has no price for device type '{device_type}'; "
                f"set cost.prices.{device_type}=<price per device-hour>"
            )
        amount = self.prices[device_type] * devices * seconds / 3600
        return CostQuote(device_type, devices, seconds, amount, self.currency)
