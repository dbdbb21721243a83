"""Batches of token windows for the training run, drawn from a snapshot through the reader.

Each sample (a document) starts one window of ``seq_len + 1`` tokens per epoch, at a seeded
offset inside it, running on into the next stored documents when it is short. Which documents
a (step, micro-batch, rank) reads comes from the reader's order and partition, so the draw
depends on nothing else: a run resumes at any step, on any number of workers, with exactly the
batches it would have seen; ranks never overlap, and each epoch sees every document once.
Tokens come from the feature cache, computed once per (snapshot, tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import torch

from xirang_core.data.features import Features, cached, tokenize
from xirang_core.data.order import EpochOrder, Partition
from xirang_core.data.reader import ShardReader
from xirang_core.errors import DataError
from xirang_core.specs import Tokenizer


@dataclass
class TokenCorpus:
    """A snapshot's documents as token arrays, split into training and held-out samples."""

    features: Features
    train_ids: np.ndarray
    val_ids: np.ndarray
    order: EpochOrder
    snapshot: str
    from_cache: bool
    tokenizer: Tokenizer

    @classmethod
    def open(
        cls, reader: ShardReader, root, val_fraction: float, tokenizer: Tokenizer
    ) -> TokenCorpus:
        transform, apply = tokenize(tokenizer)
        snap = reader.snap
        features, hit = cached(root, snap.id, transform, lambda: snapshot_tables(reader), apply)
        n = len(features.offsets) - 1
        n_val = round(n * val_fraction) if val_fraction else 0
        if n - n_val < 1:
            raise DataError(f"snapshot {snap.id} has {n} samples; none left for training")
        ids = np.arange(n)
        train, val = ids[: n - n_val], ids[n - n_val :]
        return cls(features, train, val, reader.order(), snap.id, hit, tokenizer)


def snapshot_tables(reader: ShardReader) -> Iterator[pa.Table]:
    """Every shard in index order, through the reader's tiers (checksums included)."""
    fetcher = reader.fetcher
    for shard in range(len(reader.snap.shards)):
        yield fetcher.table(shard, lambda s: float(s), {shard})


class TokenBatches:
    """Deterministic windows for (step, micro-batch, rank); ``split`` is train or val."""

    def __init__(
        self, corpus: TokenCorpus, seq_len: int, part: Partition, accum: int, seed: int, split: str
    ) -> None:
        self.corpus, self.seq_len, self.part = corpus, seq_len, part
        self.accum, self.seed, self.split = accum, seed, split
        self.ids = corpus.train_ids if split == "train" else corpus.val_ids
        if split == "val" and len(self.ids) == 0:
            self.ids = corpus.train_ids  # no held-out part: evaluate on training documents
        if len(corpus.features.tokens) <= seq_len + 1:
            raise DataError(f"the corpus holds fewer than {seq_len + 1} tokens; lower data.seq_len")

    @lru_cache(maxsize=4)  # noqa: B019 - a few epochs' orders, owned by this object
    def epoch_order(self, epoch: int) -> np.ndarray:
        """This split's documents in the reader's order for ``epoch``."""
        if self.split != "train":
            return self.ids
        order = EpochOrder(
            self.corpus.order.shard_samples,
            self.seed,
            epoch,
            self.corpus.order.shuffle,
            self.corpus.order.block_shards,
        ).samples
        return order[np.isin(order, self.ids, assume_unique=True)]

    def positions(self, step: int, micro: int) -> np.ndarray:
        """Reading positions of this rank's rows for (step, micro). Whatever the number of ranks,
        step ``s`` covers the same global positions, so the optimizer sees the same batch."""
        batch = (step - 1) * self.accum + micro if self.split == "train" else step
        return self.part.positions(batch)

    def documents(self, step: int, micro: int) -> np.ndarray:
        """Document ids of this rank's rows for (step, micro); positions run on across epochs."""
        return self._documents(self.positions(step, micro))

    def _documents(self, positions: np.ndarray) -> np.ndarray:
        n = len(self.ids)
        docs = np.empty(len(positions), dtype=np.int64)
        for epoch in np.unique(positions // n):
            mask = positions // n == epoch
            docs[mask] = self.epoch_order(int(epoch))[positions[mask] % n]
        return docs

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        positions = self.positions(step, micro)
        docs = self._documents(positions)
        feats = self.corpus.features
        span = self.seq_len + 1
        room = np.maximum(feats.lengths()[docs] - span, 0)
        unit = unit_floats(self.seed * 2 + (self.split == "val"), positions)
        starts = feats.offsets[docs] + (unit * (room + 1)).astype(np.int64)
        index = (starts[:, None] + np.arange(span)) % len(feats.tokens)
        tokens = torch.from_numpy(np.asarray(feats.tokens[index], dtype=np.int64))
        return tokens[:, :-1], tokens[:, 1:]


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def unit_floats(seed: int, positions: np.ndarray) -> np.ndarray:
    """A uniform number in [0, 1) per reading position (splitmix64 of seed and position).

    Keyed by the global position rather than by rank, so a sample gets the same window on any
    number of ranks and a run resumed on another world size continues the same trajectory."""
    with np.errstate(over="ignore"):
        z = positions.astype(np.uint64) * _GOLDEN + np.uint64(seed % 2**64) * _MIX2
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)
