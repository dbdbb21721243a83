"""Training batches read by DataLoader worker processes, several steps to one transfer.

:class:`~xirang_core.data.tokens.TokenBatches` answers any (step, micro-batch) on its own, so
worker processes can read ahead without sharing state: worker ``w`` reads chunks ``w, w + W, ...``
and the DataLoader hands them back in order. A tensor a worker returns travels through a
shared-memory segment of its own; one per batch costs about as much as reading the batch, so a
chunk of ``chunk`` batches is stacked into one tensor and split again here (the batches are
views of it). The batches are exactly those of ``TokenBatches.get``, in the loop's order.

:class:`LoaderBatches` is what the training loop reads (``data.num_workers`` > 0): the loop's
``get(step, micro)`` answered from :func:`worker_batches`, the path benchmarks/data_loading.py
measures. A batch asked for out of order (a resume, evaluation's own order) restarts the
workers at it, so resume stays exact on any world size: batches are a function of the step.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from xirang_core.data.tokens import TokenBatches

#: batches stacked into one transfer from a worker process
CHUNK_BATCHES = 16
#: workers fork, so they inherit what the first batch decoded, even in a process whose default
#: start method is spawn (a DDP rank started by torch's elastic launcher); spawn where no fork
_FORK = "fork" if "fork" in multiprocessing.get_all_start_methods() else None


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
    first_micro: int = 0,
) -> Iterator[torch.Tensor]:
    """The [rows, seq_len + 1] token rows of steps ``first_step .. last_step`` (every micro-batch
    of a step, in order, from ``first_micro`` of the first), read by ``num_workers`` DataLoader
    processes (0: this one)."""
    pairs = [(s, m) for s in range(first_step, last_step + 1) for m in range(batches.accum)]
    pairs = pairs[first_micro:]
    if num_workers and pairs:
        # the first batch is read here from the record batches its rows need (a resume's first
        # batch need not wait for its whole block); then its block is packed here, so the
        # workers forked after it inherit it and the next shards decoded, instead of each
        # loading the same ones at the same time
        first = batches.positions(*pairs[0])
        yield torch.from_numpy(batches.rows(first, sparse=True))
        batches.rows(first)
        pairs = pairs[1:]
        for named in batches.sources:
            named.source.settle()
    loader = torch.utils.data.DataLoader(
        _Chunks(batches, pairs, chunk),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context=_FORK if num_workers else None,
    )
    for stacked in loader:
        yield from stacked


class LoaderBatches:
    """``get(step, micro)`` as :class:`TokenBatches` answers it, read ahead in order by
    DataLoader worker processes; every other attribute is the wrapped batches'."""

    def __init__(self, batches: TokenBatches, last_step: int, num_workers: int) -> None:
        self.batches, self.last_step, self.num_workers = batches, last_step, num_workers
        self._rows: Iterator[torch.Tensor] | None = None
        self._next: tuple[int, int] | None = None
        self._shares = batches.shares  # the workers read as these deal (parallel.balance)

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, ...]:
        if self.batches.document_mask or self.batches.loss_mask or step > self.last_step:
            return self.batches.get(step, micro)  # document and loss flags: read here
        stale = (step, micro) != self._next or self._shares is not self.batches.shares
        if self._rows is None or stale:
            self.close_workers()
            self._shares = self.batches.shares
            self._rows = worker_batches(
                self.batches, step, self.last_step, self.num_workers, first_micro=micro
            )
        rows = next(self._rows)
        following = micro + 1 < self.batches.accum
        self._next = (step, micro + 1) if following else (step + 1, 0)
        return rows[:, :-1], rows[:, 1:]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.batches, name)

    def close_workers(self) -> None:
        """Stop the worker processes reading ahead (a generator's close ends its DataLoader)."""
        if self._rows is not None:
            self._rows.close()  # type: ignore[attr-defined]
        self._rows, self._next = None, None

    def close(self) -> None:
        self.close_workers()
        self.batches.close()


def loop_batches(batches: TokenBatches, last_step: int, num_workers: int) -> Any:
    """The training batches the loop reads: through ``num_workers`` DataLoader processes, or
    ``batches`` itself (read in the loop's process) for 0."""
    return LoaderBatches(batches, last_step, num_workers) if num_workers > 0 else batches
