"""Heterogeneity-aware placement (Gavel-like): each job class on the device type where it runs
best per unit of cost.

Gavel's insight is that one speed factor per device type is lossy: a V100 is 11x a K80 for one
model and 0.7x for another. This policy keeps the default policy's ordering, quotas and
preemption, and changes only the device-type preference: types are ranked by the job class's
throughput per unit of price. Without a price book, a type's price is its mean speed over all
classes, so each class goes where its *comparative* advantage is largest and the fast devices
stay free for the classes that gain most from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from xirang_pool.policies.priority import PriorityQuota

if TYPE_CHECKING:
    from xirang.pool import PoolView, Throughputs


class HeteroAware(PriorityQuota):
    name: ClassVar[str] = "hetero"

    def prefer_types(self, job_class: str, engine: PoolView) -> list[str]:
        """Eligible types by throughput per unit of price, best first."""
        cards = engine.throughputs
        eligible = [t for t in engine.cluster.types if cards.devices_for(job_class, 1, t)]
        score = {t: cards.relative(job_class, t) / _price(cards, t) for t in eligible}
        return sorted(eligible, key=lambda t: (-score[t], t))


def _price(cards: Throughputs, device_type: str) -> float:
    """The price book's price, else the type's mean speed over all known classes."""
    if device_type in cards.prices:
        return cards.prices[device_type]
    classes = cards.classes() or ["default"]
    return sum(cards.relative(c, device_type) for c in classes) / len(classes) or 1.0
