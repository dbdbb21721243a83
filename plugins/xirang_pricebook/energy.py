"""Energy of a run: the device's own power reading where its plugin has one, else the config.

A price book's ``watts`` per device type is a nominal figure (the board's rating, or what
calibration saw); a device plugin that reads power (NVML's power usage on NVIDIA GPUs, through
``power_watts()`` of the device backend) says what the run actually drew. A
:class:`PowerSampler` reads it every ``interval_s`` while the run trains and keeps the mean;
:func:`run_watts` prefers that mean to the configured figure. Backends without a reading (the
CPU) keep the configured watts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

#: where a run's watts came from
MEASURED, CONFIGURED = "measured", "configured"


class PowerSampler:
    """The mean power one device drew, sampled at most every ``interval_s`` seconds."""

    def __init__(
        self,
        backend: Any,
        device_index: int | None = None,
        interval_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = getattr(backend, "power_watts", None)
        self.device_index = device_index
        self.interval_s = interval_s
        self.clock = clock
        self.total_w = 0.0
        self.samples = 0
        self._next = float("-inf")

    @property
    def can_measure(self) -> bool:
        return callable(self.read)

    def sample(self) -> None:
        """Read the power now if the interval has passed (cheap to call every step)."""
        now = self.clock()
        if self.read is None or now < self._next:
            return
        self._next = now + self.interval_s
        try:
            readings = self.read()
        except Exception:  # a failing reading must never stop training
            self.read = None
            return
        value = self._pick(readings)
        if value is not None:
            self.total_w += value
            self.samples += 1

    def _pick(self, readings: Mapping[int, float]) -> float | None:
        """This run's device, or the node's mean when the run's device is not known."""
        if self.device_index is not None:
            return readings.get(self.device_index)
        return sum(readings.values()) / len(readings) if readings else None

    @property
    def mean_w(self) -> float | None:
        return self.total_w / self.samples if self.samples else None


def run_watts(
    device_type: str, measured_w: float | None, configured: Mapping[str, float]
) -> tuple[float, str]:
    """Watts per device for a run and where they came from: the reading, else the config."""
    if measured_w is not None:
        return float(measured_w), MEASURED
    return float(configured.get(device_type, 0.0)), CONFIGURED
