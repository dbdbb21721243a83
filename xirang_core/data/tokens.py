"""Batches of token windows drawn from byte shards.

The draw for (step, micro-batch, rank) depends on nothing else, so a run resumes at any step, on
any number of workers, with exactly the batches it would have seen; ranks never overlap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from xirang_core.errors import DataError


@dataclass
class TokenShards:
    """Memory-mapped shards, split into a training part and a held-out tail for validation."""

    arrays: list[np.ndarray]
    val_fraction: float

    @classmethod
    def open(cls, folder: Path, val_fraction: float) -> TokenShards:
        index_path = folder / "index.json"
        if not index_path.exists():
            raise DataError(f"{folder} has no index.json; it is not a packed dataset")
        index = json.loads(index_path.read_text())
        arrays = []
        for shard in index["shards"]:
            path = folder / shard["name"]
            if not path.exists() or path.stat().st_size != shard["bytes"]:
                raise DataError(f"shard {path} is missing or truncated; delete {folder} to repack")
            arrays.append(np.memmap(path, dtype=np.uint8, mode="r"))
        return cls(arrays, val_fraction)

    def split_point(self, array: np.ndarray) -> int:
        return int(len(array) * (1 - self.val_fraction))


class TokenBatches:
    """Deterministic random windows of ``seq_len + 1`` tokens; ``split`` is train or val."""

    def __init__(
        self, shards: TokenShards, seq_len: int, batch: int, seed: int, rank: int, split: str
    ) -> None:
        self.shards, self.seq_len, self.batch = shards, seq_len, batch
        self.seed, self.rank, self.split = seed, rank, split
        spans = [self._span(a) for a in shards.arrays]
        self.spans = [(i, lo, hi) for i, (lo, hi) in enumerate(spans) if hi - lo > seq_len + 1]
        if not self.spans:
            raise DataError(f"no shard holds a {split} window of {seq_len + 1} tokens")
        weights = np.array([hi - lo for _, lo, hi in self.spans], dtype=np.float64)
        self.weights = weights / weights.sum()

    def _span(self, array: np.ndarray) -> tuple[int, int]:
        cut = self.shards.split_point(array)
        return (0, cut) if self.split == "train" else (cut, len(array))

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, step, micro, self.rank, self.split == "val"])
        picks = rng.choice(len(self.spans), size=self.batch, p=self.weights)
        rows = np.empty((self.batch, self.seq_len + 1), dtype=np.int64)
        for row, pick in enumerate(picks):
            shard, lo, hi = self.spans[pick]
            start = int(rng.integers(lo, hi - self.seq_len - 1))
            rows[row] = self.shards.arrays[shard][start : start + self.seq_len + 1]
        tokens = torch.from_numpy(rows)
        return tokens[:, :-1], tokens[:, 1:]
