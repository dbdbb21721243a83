"""How a step's micro-batches are dealt over data-parallel ranks (``parallel.balance``): each
rank's count, and the slot of each of its micro-batches among the step's. Pure arithmetic, read
by the batches (which rows a rank reads) and the balancer (how counts move)."""

from __future__ import annotations

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
    """``total`` micro-batches in proportion to ``speeds`` (all positive), each rank at least
    one; rounding goes to the ranks furthest below their exact share."""
    exact = [total * v / sum(speeds) for v in speeds]
    counts = [max(1, int(e)) for e in exact]
    while sum(counts) < total:
        counts[max(range(len(counts)), key=lambda r: exact[r] - counts[r])] += 1
    while sum(counts) > total:
        spare = [r for r in range(len(counts)) if counts[r] > 1]
        counts[min(spare, key=lambda r: exact[r] - counts[r])] -= 1
    return Shares(tuple(counts))


def step_time(shares: Shares, speeds: list[float]) -> float:
    """Predicted compute time of a step: the slowest rank's micro-batches over its speed."""
    return max(c / max(v, 1e-12) for c, v in zip(shares.counts, speeds, strict=True))
