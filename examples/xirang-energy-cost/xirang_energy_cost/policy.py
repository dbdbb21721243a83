"""The energy cost policy and its settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from xirang import ConfigError
from xirang.specs import CostQuote


@dataclass
class EnergyConfig:
    currency: str = "USD"
    price_per_kwh: float = 0.20
    watts: dict[str, float] = field(default_factory=dict)


class EnergyPrice:
    def __init__(
        self, currency: str = "USD", price_per_kwh: float = 0.2, watts: dict | None = None
    ) -> None:
        if price_per_kwh < 0:
            raise ConfigError(f"cost.price_per_kwh={price_per_kwh}: must be >= 0")
        self.currency, self.price_per_kwh, self.watts = currency, price_per_kwh, dict(watts or {})

    def quote(self, device_type: str, devices: int, seconds: float) -> CostQuote:
        if device_type not in self.watts:
            raise ConfigError(
                f"cost.watts has no entry for '{device_type}'; set cost.watts.{device_type}"
            )
        kwh = self.watts[device_type] * devices * seconds / 3600 / 1000
        return CostQuote(device_type, devices, seconds, kwh * self.price_per_kwh, self.currency)
