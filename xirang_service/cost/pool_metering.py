"""Incremental metering of a pool: each tick reads only what changed since the last one.

A closed usage segment never changes (its charge is final: see the meter's placement report),
so the meter remembers the last metered point - the moment of its last tick - and next time
reads only the segments that closed since, plus the running jobs, whose open allocations are
re-charged up to ``now``. It reads from ``overlap_s`` before that point: a segment the pool
wrote just after a reader in another process (the console's sampler) looked, or stamped by a
clock a little behind the reader's, is still found, and charging a segment again replaces its
charge. The totals equal a full recomputation (tests/cost/test_pool_metering.py holds it as an
invariant); a restarted service starts from nothing and re-meters the history once.
"""

from __future__ import annotations

from xirang_service.console.state import read_usage_since
from xirang_service.cost.charges import Charge
from xirang_service.cost.meter import Meter
from xirang_service.pool.store import PoolStore


class PoolMetering:
    """One pool store's metering, remembering the last metered point between ticks."""

    def __init__(self, meter: Meter, overlap_s: float = 60.0) -> None:
        self.meter = meter
        self.overlap_s = overlap_s
        self.metered_to: float | None = None

    def charges(self, store: PoolStore, now: float) -> list[Charge]:
        """The charges that are new or changed since the last call, up to ``now``."""
        since = None if self.metered_to is None else self.metered_to - self.overlap_s
        charges = self.meter.pool_charges(read_usage_since(store, since, now), now)
        self.metered_to = now if self.metered_to is None else max(self.metered_to, now)
        return charges
