"""Sync windows: several large jobs on one pool take turns at their full gradient exchange.

A window divides wall-clock time into periods of ``slots`` equal slots; a job given slot ``slot``
starts its exchange only inside that slot, so jobs sharing links do not all-reduce at the same
moment. Whoever places jobs (a pool scheduler) assigns the slots through the
``xirang_comm_sync_window`` hook; a run's comm config can also set one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from xirang_core.errors import ConfigError


@dataclass(frozen=True)
class SyncWindow:
    """Slot ``slot`` of ``slots`` in every ``period_s`` seconds of wall-clock time."""

    period_s: float
    slot: int = 0
    slots: int = 1

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.slots < 1 or not 0 <= self.slot < self.slots:
            raise ConfigError(
                f"sync window period={self.period_s}s slot={self.slot} slots={self.slots}: need "
                f"a positive period and 0 <= slot < slots"
            )

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until this job may start its exchange (0 inside its slot)."""
        width = self.period_s / self.slots
        phase = now % self.period_s
        start = self.slot * width
        if start <= phase < start + width:
            return 0.0
        return (start - phase) % self.period_s

    def wait(self) -> float:
        """Sleep until the slot opens; returns the seconds waited."""
        pause = self.delay(time.time())
        if pause > 0:
            time.sleep(pause)
        return pause
