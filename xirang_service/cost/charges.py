"""A metered charge: one allocation of devices to one job or run, priced once."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Charge:
    """Device time held by ``ref`` (a pool job id or a run directory), and what it cost.

    ``held_s`` is how long the devices were allocated; ``busy_s`` the part they did work, so
    ``held_s - busy_s`` is idle time inside the allocation: charged (the devices were held) and
    shown apart as ``idle_micro``. ``amount_micro`` includes the idle part.
    """

    source: str
    ref: str
    project: str
    team: str
    device_type: str
    devices: int
    start: float
    held_s: float
    busy_s: float
    amount_micro: int
    idle_micro: int = 0
    capacity_class: str = "on_demand"
    energy_wh: float = 0.0
    utilisation: float | None = None
    tokens: int = 0
    loss_drop: float = 0.0
    idle_after_s: float = 0.0
    currency: str = "USD"

    @property
    def device_s(self) -> float:
        return self.devices * self.held_s

    def row(self) -> dict[str, Any]:
        return asdict(self)
