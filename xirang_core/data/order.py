"""The order samples are read in: known in advance, seeded per epoch, independent of ranks.

An epoch's order is a permutation of the shards, then a shuffle of the samples inside each block
of ``block_shards`` consecutive shards (the bounded in-memory buffer). That global order does not
depend on the number of ranks or data-loader workers; they only take turns along it: global
batch ``g`` is positions ``[g*W*B, (g+1)*W*B)`` and rank ``r`` reads its ``r``-th slice. So a
position in the order (``consumed``) is the whole resume state, valid for any world size, and
every rank reads the same number of batches. The last global batch of an epoch is topped up from
the start of the epoch's order when the sample count does not divide, so no rank runs short.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class EpochOrder:
    """Sample order of one epoch over shards holding ``shard_samples[i]`` samples each."""

    shard_samples: tuple[int, ...]
    seed: int
    epoch: int
    shuffle: bool = True
    block_shards: int = 4

    @cached_property
    def shard_sequence(self) -> np.ndarray:
        """Shard ids in the order their blocks are read."""
        n = len(self.shard_samples)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, self.epoch]).permutation(n)

    @cached_property
    def starts(self) -> np.ndarray:
        """Global id of each shard's first sample (global id = start + row)."""
        return np.concatenate([[0], np.cumsum(self.shard_samples)[:-1]]).astype(np.int64)

    @cached_property
    def samples(self) -> np.ndarray:
        """Every global sample id once, in reading order."""
        parts = []
        seq = self.shard_sequence
        for block, lo in enumerate(range(0, len(seq), self.block_shards)):
            ids = np.concatenate(
                [
                    self.starts[s] + np.arange(self.shard_samples[s])
                    for s in seq[lo : lo + self.block_shards]
                ]
            )
            if self.shuffle:
                ids = np.random.default_rng([self.seed, self.epoch, block]).permutation(ids)
            parts.append(ids)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row) of each global sample id."""
        shard = np.searchsorted(self.starts, ids, side="right") - 1
        return shard, ids - self.starts[shard]

    @cached_property
    def block_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """For each shard id, the reading positions where its block starts and ends: the shard
        is in use from its first position up to (not including) the end."""
        first = np.zeros(len(self.shard_samples), dtype=np.int64)
        end = np.zeros(len(self.shard_samples), dtype=np.int64)
        seq = self.shard_sequence
        position = 0
        for lo in range(0, len(seq), self.block_shards):
            block = seq[lo : lo + self.block_shards]
            first[block] = position
            position += int(sum(self.shard_samples[s] for s in block))
            end[block] = position
        return first, end


@dataclass(frozen=True)
class Partition:
    """Which slice of each global batch this rank reads, and which batches this worker takes."""

    batch_size: int
    world_size: int = 1
    rank: int = 0
    num_workers: int = 1
    worker: int = 0

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    def batches_in(self, samples: int, consumed: int = 0) -> int:
        """Global batches left in an epoch of ``samples`` after ``consumed`` positions."""
        return max(0, -(-(samples - consumed) // self.global_batch))

    def positions(self, batch: int, consumed: int = 0) -> np.ndarray:
        """Reading positions of this rank's samples in global batch ``batch`` after ``consumed``."""
        start = consumed + batch * self.global_batch + self.rank * self.batch_size
        return np.arange(start, start + self.batch_size)

    def mine(self, batch: int) -> bool:
        """Data-loader workers take turns, so the loader yields batches in order."""
        return batch % self.num_workers == self.worker
