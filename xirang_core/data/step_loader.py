"""Training batches read by DataLoader worker processes, several steps to one transfer.

:class:`~xirang_core.data.tokens.TokenBatches` answers any (step, micro-batch) on its own, so
worker processes can read ahead without sharing state: worker ``w`` reads chunks ``w, w + W, ...``
and the DataLoader hands them back in order. A tensor a worker returns travels through a
shared-memory segment of its own; one per batch costs about as much as reading the batch, so a
chunk of ``chunk`` batches is stacked into one tensor and split again here (the batches are
views of it). The batches are exactly those of ``TokenBatches.get``, in the loop's order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from xirang_core.data.tokens import TokenBatches

#: batches stacked into one transfer from a worker process
CHUNK_BATCHES = 16


class _Chunks(torch.utils.data.Dataset):
    """Item ``i``: the token rows of the ``i``-th run of ``chunk`` (step, micro) pairs."""

    def __init__(self, batches: TokenBatches, pairs: list[tuple[int, int]], chunk: int) -> None:
        self.batches, self.pairs, self.chunk = batches, pairs, chunk

    def __len__(self) -> int:
        return -(-len(self.pairs) // self.chunk)

    def __getitem__(self, i: int) -> torch.Tensor:
        pairs = self.pairs[i * self.chunk : (i + 1) * self.chunk]
        b = self.batches
        out = np.empty((len(pairs), b.part.batch_size, b.seq_len + 1), dtype=np.int64)
        for j, (step, micro) in enumerate(pairs):
            out[j] = b.rows(b.positions(step, micro))
        return torch.from_numpy(out)


def worker_batches(
    batches: TokenBatches,
    first_step: int,
    last_step: int,
    num_workers: int,
    chunk: int = CHUNK_BATCHES,
) -> Iterator[torch.Tensor]:
    """The [rows, seq_len + 1] token rows of steps ``first_step .. last_step`` (every micro-batch
    of a step, in order), read by ``num_workers`` DataLoader processes (0: this one)."""
    pairs = [(s, m) for s in range(first_step, last_step + 1) for m in range(batches.accum)]
    if num_workers and pairs:
        # the first batch is read here, so the workers forked after it inherit its packed block
        # and the next shards decoded, instead of each loading the same ones at the same time
        yield torch.from_numpy(batches.rows(batches.positions(*pairs[0])))
        pairs = pairs[1:]
        for named in batches.sources:
            named.source.fetcher.settle()
    loader = torch.utils.data.DataLoader(
        _Chunks(batches, pairs, chunk), batch_size=None, num_workers=num_workers
    )
    for stacked in loader:
        yield from stacked
