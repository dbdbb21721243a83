"""How a step's micro-batches are dealt over data-parallel ranks (``parallel.balance``): each
rank's count, and the slot of each of its micro-batches among the step's. Pure arithmetic, read
by the batches (which rows a rank reads) and the balancer (how counts move)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Shares:
    """Micro-batches each data-parallel rank runs per step."""

    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)

    def slot(self, rank: int, micro: int) -> int:
        """Index among the step's micro-batches of ``rank``'s ``micro``-th: dealt round by
        round, rank by rank (round ``m`` goes to the ranks with more than ``m``), which is the
        uniform split's order when the shares are equal."""
        before = sum(min(c, micro) for c in self.counts)
        return before + sum(1 for c in self.counts[:rank] if c > micro)


def even_shares(total: int, world: int) -> Shares:
    """``total`` micro-batches over ``world`` ranks as evenly as whole numbers allow."""
    base, extra = divmod(total, world)
    return Shares(tuple(base + (r < extra) for r in range(world)))


def proportional(total: int, speeds: list[float]) -> Shares:
    """``total`` micro-batches by ``speeds`` (all positive), each rank at least one, split so
    that the slowest rank's time, which is the step's, is the least any split gives: one each,
    then each further micro-batch to the rank that would finish it first (optimal for equal
    jobs on machines of different speeds). Rounding the exact proportional shares is not: at
    2.5:1, 16 micro-batches round to 11:5, a step of 5 slow micro-batches' time, where 12:4
    takes 4.8. Equal speeds give :func:`even_shares`'s split (ties go to the lower rank)."""
    counts = [1] * len(speeds)
    finishes = [(2 / v, r) for r, v in enumerate(speeds)]
    heapq.heapify(finishes)
    for _ in range(total - len(speeds)):
        _, rank = heapq.heappop(finishes)
        counts[rank] += 1
        heapq.heappush(finishes, ((counts[rank] + 1) / speeds[rank], rank))
    return Shares(tuple(counts))


def step_time(shares: Shares, speeds: list[float]) -> float:
    """Predicted compute time of a step: the slowest rank's micro-batches over its speed."""
    return max(c / max(v, 1e-12) for c, v in zip(shares.counts, speeds, strict=True))
