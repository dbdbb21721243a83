"""Mixtures: which source each global row comes from, for weighted snapshots.

Rows are dealt in chunks of ``CHUNK``: each chunk holds every source's quota (its weight times
the chunk, rounded by largest remainder so the quotas sum to the chunk) in a seeded order of its
own. So a row's source and its index within that source follow from the row number alone
(deterministic and resumable at any step, on any number of ranks), and every source's share
over any whole number of chunks is its weight to within half a row in a thousand.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

CHUNK = 1000


def largest_remainder(weights: tuple[float, ...] | list[float], total: int) -> np.ndarray:
    """``total`` split in proportion to ``weights`` as integers that sum to it exactly."""
    share = np.asarray(weights, dtype=np.float64) / sum(weights) * total
    quotas = np.floor(share).astype(np.int64)
    left = total - int(quotas.sum())
    quotas[np.argsort(-(share - quotas), kind="stable")[:left]] += 1
    return quotas


@dataclass(frozen=True)
class Schedule:
    """Source of every global row for sources of ``weights`` (any positive numbers)."""

    weights: tuple[float, ...]
    seed: int = 0

    @cached_property
    def quotas(self) -> np.ndarray:
        """Rows per chunk of each source: weight shares of ``CHUNK``, largest remainder."""
        return largest_remainder(self.weights, CHUNK)

    @lru_cache(maxsize=8)  # noqa: B019 - a few chunks' orders, owned by this object
    def chunk(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, rank among that source's rows in the chunk) for each slot of a chunk."""
        slots = np.repeat(np.arange(len(self.quotas)), self.quotas)
        source = np.random.default_rng([self.seed, 0x5EED, index]).permutation(slots)
        rank = np.empty(CHUNK, dtype=np.int64)
        for s in range(len(self.quotas)):
            where = np.flatnonzero(source == s)
            rank[where] = np.arange(len(where))
        return source, rank

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, row within that source) of each global row."""
        rows = np.asarray(rows, dtype=np.int64)
        sources, within = np.empty_like(rows), np.empty_like(rows)
        for i, row in enumerate(rows.tolist()):
            index, slot = divmod(row, CHUNK)
            source, rank = self.chunk(index)
            sources[i] = source[slot]
            within[i] = index * self.quotas[source[slot]] + rank[slot]
        return sources, within

    def counts(self, rows: int) -> np.ndarray:
        """Rows each source contributes to global rows ``[0, rows)``."""
        index, slot = divmod(int(rows), CHUNK)
        partial = np.bincount(self.chunk(index)[0][:slot], minlength=len(self.quotas))
        return index * self.quotas + partial
