"""The reader: an iterable dataset of batches streamed from a snapshot's shards.

It yields Arrow tables of ``batch_size`` rows, taken column-wise from decoded shards (no
per-sample work), in the deterministic order of :class:`xirang.data.EpochOrder`. While a block is
read, the shards of the next ones are prefetched in reading order. ``state_dict()`` is a position
in the global order, so a run resumes mid-epoch exactly, on the same or another number of ranks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # imported once here, not lazily in every data-loader worker
import torch

from xirang import DataError
from xirang.data import EpochOrder, FsspecTier, Partition
from xirang_data.fetch import ProcessFetcher, ShardFetcher, TierSettings
from xirang_data.snapshot import Snapshot

#: batches gathered by one columnar ``take`` and then sliced: per-batch cost becomes a slice
BATCHES_PER_TAKE = 64


@dataclass(frozen=True)
class ReadSettings:
    """Shuffle and partition settings (``data.shuffle``, ``data.shuffle_block`` ...)."""

    batch_size: int = 32
    seed: int = 0
    shuffle: bool = True
    block_shards: int = 4
    world_size: int = 1
    rank: int = 0


class ShardReader(ProcessFetcher, torch.utils.data.IterableDataset):
    """Batches of one rank; in a DataLoader, its workers take turns so batches stay in order."""

    def __init__(
        self, snap: Snapshot, origin: FsspecTier, read: ReadSettings, tiers: TierSettings
    ) -> None:
        if not 0 <= read.rank < read.world_size:
            raise DataError(f"rank {read.rank} is outside a world of {read.world_size}")
        self.snap, self.origin, self.read, self.tiers = snap, origin, read, tiers
        self.epoch, self.consumed = 0, 0
        self._fetcher: ShardFetcher | None = None
        self._pid = os.getpid()

    # --- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"snapshot": self.snap.id, "epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("snapshot") != self.snap.id:
            raise DataError(
                f"reader state is for snapshot {state.get('snapshot')}, not {self.snap.id}; "
                "resume with the snapshot the run was pinned to"
            )
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])

    def order(self, epoch: int | None = None) -> EpochOrder:
        r = self.read
        counts = tuple(s.samples for s in self.snap.shards)
        return EpochOrder(
            counts, r.seed, self.epoch if epoch is None else epoch, r.shuffle, r.block_shards
        )

    def partition(self) -> Partition:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        r = self.read
        return Partition(r.batch_size, r.world_size, r.rank, workers, worker)

    def __len__(self) -> int:
        return self.partition().batches_in(self.snap.samples, self.consumed)

    # --- reading -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.Table]:
        """This rank's batches for the rest of the current epoch, then the epoch advances.

        In a plain DataLoader, workers take turns batch by batch, so batches stay in order."""
        order, part, start = self.order(), self.partition(), self.consumed
        for span in self._spans(part, start):
            mine = [g for g in span if part.mine(g)]
            rows = self._rows(order, part, mine, start)
            for g in span:
                batch = (
                    rows.slice(mine.index(g) * part.batch_size, part.batch_size)
                    if g in mine
                    else None
                )
                self.consumed = min(self.snap.samples, start + (g + 1) * part.global_batch)
                if batch is not None:
                    yield batch  # counted as consumed once the caller holds it
        self.epoch, self.consumed = self.epoch + 1, 0

    def chunks(self) -> Iterator[pa.Table]:
        """``BATCHES_PER_TAKE`` consecutive batches as one table; workers take turns by chunk.
        :class:`StatefulLoader` moves these between processes and slices them into batches."""
        order, part, start = self.order(), self.partition(), self.consumed
        for index, span in enumerate(self._spans(part, start)):
            if part.mine(index):
                yield self._rows(order, part, list(span), start)

    def _spans(self, part: Partition, start: int) -> Iterator[range]:
        total = part.batches_in(self.snap.samples, start)
        for lo in range(0, total, BATCHES_PER_TAKE):
            yield range(lo, min(lo + BATCHES_PER_TAKE, total))

    def _rows(self, order: EpochOrder, part: Partition, batches: list[int], start: int) -> pa.Table:
        if not batches:
            return pa.table({})
        return self.take(order, np.concatenate([part.positions(g, start) for g in batches]))

    def take(self, order: EpochOrder, positions: np.ndarray) -> pa.Table:
        """The rows at reading ``positions`` (wrapping into the epoch's start), in that order."""
        ids = order.samples[positions % len(order.samples)]
        shard_of, row_of = order.locate(ids)
        first_use, block_end = order.block_spans
        here = int(positions[0]) % len(order.samples)
        protect = {int(s) for s in np.unique(shard_of)}
        next_use = _next_use(first_use, block_end, here, protect)
        # the shards of this take load in parallel, then the next ones in reading order
        needed = sorted(protect)
        self.fetcher.prefetch(
            needed + self._upcoming(order, first_use, here), next_use, protect, len(needed)
        )
        pieces, placed = [], []
        for shard in sorted(protect):
            rows = np.flatnonzero(shard_of == shard)
            table = self.fetcher.table(shard, next_use, protect)
            pieces.append(table.take(pa.array(row_of[rows])))
            placed.append(rows)
        batch = pa.concat_tables(pieces)
        return batch.take(pa.array(np.argsort(np.concatenate(placed), kind="stable")))

    def _upcoming(self, order: EpochOrder, first_use: np.ndarray, here: int) -> list[int]:
        later = [int(s) for s in order.shard_sequence if first_use[s] > here]
        return sorted(later, key=lambda s: first_use[s])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fetcher": None}

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()


def _next_use(first_use: np.ndarray, block_end: np.ndarray, here: int, current: set[int]):
    """When each shard is next needed from reading position ``here`` (inf: not this epoch)."""

    def next_use(shard: int) -> float:
        if shard in current or first_use[shard] <= here < block_end[shard]:
            return float(here)
        at = int(first_use[shard])
        return float(at) if at > here else float("inf")

    return next_use


class StatefulLoader:
    """A DataLoader over a reader whose ``state_dict()`` counts what the consumer has received."""

    def __init__(self, reader: ShardReader, num_workers: int = 0, **kwargs: Any) -> None:
        self.reader, self.num_workers, self.kwargs = reader, num_workers, kwargs
        self.state = reader.state_dict()

    def __iter__(self) -> Iterator[pa.Table]:
        r = self.reader
        start = r.state_dict()
        size = r.read.batch_size
        for seen, batch in enumerate(self._batches(), 1):
            consumed = min(r.snap.samples, start["consumed"] + seen * size * r.read.world_size)
            self.state = {**start, "consumed": consumed}
            yield batch
        self.state = {**start, "epoch": start["epoch"] + 1, "consumed": 0}
        r.load_state_dict(self.state)

    def _batches(self) -> Iterator[pa.Table]:
        """Batches in order: straight from the reader, or chunk by chunk from worker processes
        (one transfer per chunk, not per batch, so the loader's per-item cost is amortised)."""
        if not self.num_workers:
            yield from self.reader
            return
        loader = torch.utils.data.DataLoader(
            _ChunkStream(self.reader),
            batch_size=None,
            num_workers=self.num_workers,
            collate_fn=_pack,
            **self.kwargs,
        )
        size = self.reader.read.batch_size
        for packed in loader:
            chunk = _unpack(packed)
            for lo in range(0, chunk.num_rows, size):
                yield chunk.slice(lo, size)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)


class _ChunkStream(torch.utils.data.IterableDataset):
    """The reader's chunks, for data-loader worker processes."""

    def __init__(self, reader: ShardReader) -> None:
        self.reader = reader

    def __iter__(self) -> Iterator[pa.Table]:
        return self.reader.chunks()


def _pack(batch: pa.Table) -> pa.Buffer:
    """A batch as one Arrow IPC buffer: pickling a table slice would copy its whole parent."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_table(batch)
    return sink.getvalue()


def _unpack(buffer: pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(buffer).read_all()
