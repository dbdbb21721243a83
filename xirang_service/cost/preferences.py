"""Cost preferences the pool's scheduling pass consults (the pool's ``Preferences`` protocol).

A pool started with a price book (``xirang pool serve --prices book.yaml``) builds one
:class:`CostPreferences` from it; the engine asks it on every pass:

* **cheap windows** - a job submitted as interruptible (payload ``{"interruptible": true}``)
  waits until the cheapest window and is reclaimed (it checkpoints and requeues) ``lead_s``
  before that window ends, so it never runs at the peak price;
* **deadlines** - from ``lead_s`` before each deadline in ``placement.deadlines`` until the
  deadline, non-critical jobs (priority below ``critical``) are reclaimed and held, so the
  devices are free for the critical work the deadline is for;
* **device types** - every policy's type order is re-ranked by throughput per unit of cost, and
  when that is equal the type drawing less energy per unit of work comes first.

Every decision is one of the :mod:`xirang_service.cost.placement` helpers; this class only adapts
them to pool jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from xirang_service.cost.errors import CostError
from xirang_service.cost.moments import iso_timestamp
from xirang_service.cost.placement import (
    cheap_start,
    cheap_until,
    next_change,
    rank_device_types,
    reclaim_before,
)
from xirang_service.cost.pricebook import PriceBook
from xirang_service.pool.cards import Throughputs

#: the payload key a submitter sets to mark a job interruptible
INTERRUPTIBLE = "interruptible"


@dataclass(frozen=True)
class CostPreferences:
    """Placement preferences from a price book, plus the operator's deadlines (epoch s)."""

    book: PriceBook
    deadlines: tuple[float, ...] = ()
    lead_s: float = 1800.0
    capacity_class: str = "on_demand"

    @classmethod
    def from_settings(cls, book: PriceBook, settings: Mapping[str, Any] | None) -> CostPreferences:
        """From a price book file's ``placement:`` section: ``deadlines`` (ISO times or epoch
        seconds) and ``reclaim_lead_min`` (minutes before a deadline or a window's end)."""
        values = dict(settings or {})
        unknown = sorted(set(values) - {"deadlines", "reclaim_lead_min"})
        if unknown:
            raise CostError(
                f"placement.{unknown[0]} is unknown; valid: deadlines, reclaim_lead_min"
            )
        lead_min = float(values.get("reclaim_lead_min", 30))
        if lead_min < 0:
            raise CostError(f"placement.reclaim_lead_min={lead_min}: must be >= 0")
        deadlines = tuple(sorted(_epoch(d) for d in values.get("deadlines") or ()))
        return cls(book, deadlines, lead_min * 60)

    # --- the pool's Preferences protocol ----------------------------------------------------

    def order_types(self, job_class: str, types: list[str], throughputs: Throughputs) -> list[str]:
        """Best throughput per cost first, energy breaking ties; unpriced types keep the
        policy's order, after the priced ones."""
        speeds = {t: throughputs.relative(job_class, t) for t in types}
        ranked = rank_device_types(self.book, speeds, self.capacity_class)
        return ranked + [t for t in types if t not in ranked]

    def hold(self, job: Any, now: float) -> str | None:
        """Why ``job`` should not hold devices at ``now``: the cheap window has not begun (or
        ends within ``lead_s``) for interruptible work, or a deadline is near for non-critical
        work; None when it may run."""
        if interruptible(job):
            start = cheap_start(self.book, now)
            if start > now:
                return f"interruptible: waits for the cheap window at {_iso(start)}"
            end = cheap_until(self.book, now)
            if end - now <= self.lead_s:
                return f"interruptible: the cheap window ends at {_iso(end)}"
        deadline = self._next_deadline(now)
        if deadline is not None and reclaim_before([job], deadline, now, self.lead_s):
            return f"non-critical: devices are freed for the deadline at {_iso(deadline)}"
        return None

    def reclaim(self, running: Iterable[Any], now: float) -> list[tuple[Any, str]]:
        """The running jobs :meth:`hold` would not start now, lowest priority first."""
        held = [(job, self.hold(job, now)) for job in running]
        chosen = [(job, reason) for job, reason in held if reason]
        return sorted(chosen, key=lambda pair: (pair[0].priority, -(pair[0].started or 0.0)))

    def wake_at(self, now: float) -> float | None:
        """The next window change, the lead before the cheap window in force ends, or a
        deadline (and the lead before it), whichever comes first."""
        moments = [next_change(self.book, now), cheap_until(self.book, now) - self.lead_s]
        for deadline in self.deadlines:
            moments += [deadline - self.lead_s, deadline]
        later = [t for t in moments if t is not None and t > now]
        return min(later) if later else None

    def _next_deadline(self, now: float) -> float | None:
        return next((d for d in self.deadlines if d > now), None)


def interruptible(job: Any) -> bool:
    """Whether the submitter marked ``job`` interruptible (payload ``interruptible: true``)."""
    return bool((getattr(job, "payload", None) or {}).get(INTERRUPTIBLE))


def _epoch(value: Any) -> float:
    """A deadline as epoch seconds: a number, or an ISO time (UTC unless it names a zone)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    hint = f"placement.deadlines entry {value!r}: give an ISO time like 2026-12-01T18:00Z"
    return iso_timestamp(value, hint)


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
