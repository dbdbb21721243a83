"""Placement preferences a scheduler can consult: when and where a job is cheapest.

* :func:`cheap_start` - an interruptible experiment may wait for the cheapest window;
* :func:`cheap_until` - when the cheap stretch it runs in ends (it is reclaimed before then);
* :func:`next_change` - the next hour the price changes (when a waiting job should look again);
* :func:`rank_device_types` - device types by throughput per unit cost, the more
  energy-efficient first when throughput per cost is equal (within ``tie``);
* :func:`reclaim_before` - non-critical running jobs to reclaim so a deadline is met.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xirang_service.cost.pricebook import HOUR, PriceBook

#: the priority (pool value) of jobs never reclaimed for a deadline
CRITICAL = 3


def cheap_start(book: PriceBook, now: float, horizon_h: int = 24) -> float:
    """The first moment within ``horizon_h`` hours at the cheapest window multiplier."""
    best = book.cheapest_multiplier()
    if _multiplier(book, now) <= best:
        return now
    first_hour = (int(now // HOUR) + 1) * HOUR
    for k in range(horizon_h):
        t = first_hour + k * HOUR
        if _multiplier(book, t) <= best:
            return float(t)
    return now


def cheap_until(book: PriceBook, now: float, horizon_h: int = 24) -> float:
    """The end of the cheapest-multiplier stretch ``now`` lies in (``now`` when not cheap now,
    ``now + horizon_h`` hours when it lasts past the horizon, e.g. a book without windows)."""
    best = book.cheapest_multiplier()
    if _multiplier(book, now) > best:
        return now
    t = (int(now // HOUR) + 1) * HOUR
    for _ in range(horizon_h):
        if _multiplier(book, t) > best:
            return float(t)
        t += HOUR
    return now + horizon_h * HOUR


def next_change(book: PriceBook, now: float, horizon_h: int = 24) -> float | None:
    """The first hour boundary after ``now`` where the window multiplier changes, or None."""
    current = _multiplier(book, now)
    t = (int(now // HOUR) + 1) * HOUR
    for _ in range(horizon_h):
        if _multiplier(book, t) != current:
            return float(t)
        t += HOUR
    return None


def rank_device_types(
    book: PriceBook,
    throughputs: Mapping[str, float],
    capacity_class: str = "on_demand",
    tie: float = 0.02,
) -> list[str]:
    """Priced device types, best throughput per cost first; energy per unit of work breaks ties."""
    value = {}
    for device_type, speed in throughputs.items():
        if speed <= 0 or device_type not in book.prices:
            continue
        price = book.hourly(device_type, capacity_class) + book.energy_price(device_type)
        value[device_type] = speed / price if price else float("inf")
    best_first = sorted(value, key=lambda t: -value[t])
    groups: list[list[str]] = []
    for device_type in best_first:
        if groups and value[device_type] >= value[groups[-1][0]] * (1 - tie):
            groups[-1].append(device_type)
        else:
            groups.append([device_type])
    energy = {t: book.watts.get(t, 0.0) / throughputs[t] for t in value}
    return [t for g in groups for t in sorted(g, key=lambda t: (energy[t], t))]


def reclaim_before(
    running: Iterable[Any], deadline: float, now: float, lead_s: float = 1800.0
) -> list[Any]:
    """Non-critical running jobs to reclaim when ``deadline`` is within ``lead_s``.

    Lowest priority first, then the most recently started (it loses the least work).
    """
    if now < deadline - lead_s:
        return []
    victims = [job for job in running if job.priority < CRITICAL]
    return sorted(victims, key=lambda j: (j.priority, -(j.started or 0.0)))


def _multiplier(book: PriceBook, t: float) -> float:
    window = book.window_at(t)
    return window.multiplier if window else 1.0
