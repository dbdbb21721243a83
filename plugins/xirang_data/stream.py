"""Training rows streamed from token shards: packed across documents, through the tiers.

An epoch of one token snapshot is one stream of tokens: the reader's epoch order (a seeded
permutation of shards, then a shuffle of the documents inside each block of ``shuffle_block``
shards) with every training document's tokens (its end-of-document marker included) one after
another. Row ``r`` of the epoch is tokens ``[r*(seq+1), (r+1)*(seq+1))`` of that stream, so rows
pack across document boundaries and an epoch reads every training token once (the last
partial row aside). Which global rows a (step, micro-batch, rank) reads comes from the
partition, so batches are a pure function of the step: a run resumes at any step, on any
number of ranks, with exactly the rows it would have seen.

Only the block being read is packed in memory (a row crossing into the next keeps a copy of
its tail, not the block): its shards come through :class:`ShardFetcher` (decoded shards in
memory up to a byte budget, the local disk cache up to its limit, then the origin), prefetched
in reading order, and the tiers evict what is needed furthest in the future. Where a block
starts and ends in the stream is known from the manifest's tokens per shard, so no step reads
or holds the whole corpus.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
import pyarrow as pa

from xirang import DataError
from xirang.data import EpochOrder, FsspecTier
from xirang_data.fetch import ProcessFetcher, ShardFetcher, TierSettings
from xirang_data.shard_index import RangedIndex, ShardIndex
from xirang_data.snapshot import Snapshot
from xirang_data.token_shards import check_dtype

#: packed blocks kept: the one being read (a row crossing into the next copies its tail first)
BLOCKS_KEPT = 1
#: blocks whose document ends are kept (a few ints per document; a row spans one or two)
DOC_ENDS_KEPT = 8


#: ``SourceRead.val_fraction`` of a separate held-out dataset: every document held out
HELD_OUT_ALL = 1.0


@dataclass(frozen=True)
class SourceRead:
    """How one rank reads a token snapshot (``data.*`` settings and the run's seed)."""

    span: int  # seq_len + 1 tokens a row
    seed: int = 0
    shuffle: bool = True
    block_shards: int = 4
    val_fraction: float = 0.0
    vocab_size: int = 256
    rebuild: str = "xirang data tokenize ..."  # the command that rebuilds these token shards


@dataclass
class _Plan:
    """One epoch's blocks: their shards, reading positions and where they start in the stream."""

    order: EpochOrder
    blocks: list[np.ndarray]
    cum: np.ndarray  # tokens before each block; cum[-1] is the epoch's training tokens
    block_of: np.ndarray  # shard -> its block


@dataclass
class _Sparse:
    """A block's layout without its tokens: each document's shard, row and end in the block,
    and the shards' indexes, which decode the record batches a row reads and no others."""

    shard_of: np.ndarray
    row_of: np.ndarray
    ends: np.ndarray
    index: dict[int, ShardIndex | RangedIndex]

    def piece(self, lo: int, length: int) -> np.ndarray:
        """Tokens ``[lo, lo + length)`` of the block (fewer where the block ends first)."""
        hi = min(lo + length, int(self.ends[-1]) if len(self.ends) else 0)
        doc = int(np.searchsorted(self.ends, lo, side="right"))
        pieces, at = [], lo
        while at < hi:
            index = self.index[int(self.shard_of[doc])]
            begin = int(self.ends[doc - 1]) if doc else 0
            offset = int(index.offsets[self.row_of[doc]]) - begin  # block -> shard position
            until = min(hi, int(self.ends[doc]))
            pieces.append(index.values(at + offset, until + offset))
            at, doc = until, doc + 1
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


class TokenSource(ProcessFetcher):
    """Packed rows of one token snapshot: training rows by epoch, held-out rows from the tail."""

    def __init__(
        self, snap: Snapshot, origin: FsspecTier, tiers: TierSettings, read: SourceRead
    ) -> None:
        self.snap, self.origin, self.tiers, self.read = snap, origin, tiers, read
        self.counts = np.array([s.samples for s in snap.shards], dtype=np.int64)
        self.shard_tokens = np.array(snap.lineage["shard_tokens"], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        n = int(self.counts.sum())
        self.n_val = round(n * read.val_fraction) if read.val_fraction else 0
        self.n_train = n - self.n_val
        held_out_only = read.val_fraction == HELD_OUT_ALL  # a separate dataset (data.val)
        if self.n_train < 1 and not held_out_only:
            raise DataError(f"snapshot {snap.lineage['source']} has {n} samples; none for training")
        self._fetcher: ShardFetcher | None = None
        self._pid = os.getpid()
        self._blocks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._sparse: OrderedDict[tuple[int, int], _Sparse] = OrderedDict()
        #: where each document of a recent block ends in it (data.document_mask)
        self._doc_ends: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        # the device prefetcher's thread reads training rows while evaluation reads held-out ones
        self._lock = threading.RLock()
        if held_out_only and int(self.shard_tokens.sum()) < read.span:
            raise DataError(
                f"the held-out dataset {snap.lineage['source']} holds fewer than {read.span} "
                f"tokens (data.val); lower data.seq_len or hold out more documents"
            )
        if self.rows_per_epoch < 1 and not held_out_only:
            raise DataError(
                f"the corpus holds fewer than {read.span} training tokens; lower data.seq_len"
            )

    # --- layout ------------------------------------------------------------------------

    @cached_property
    def train_tokens(self) -> np.ndarray:
        """Training tokens per shard: all of it, none (held out), or up to the held-out tail."""
        ends = self.starts + self.counts
        tokens = np.where(ends <= self.n_train, self.shard_tokens, 0)
        boundary = np.flatnonzero((self.starts < self.n_train) & (ends > self.n_train))
        for shard in boundary:
            offsets, _ = self._tokens(int(shard), lambda s: float("inf"), set())
            tokens[shard] = offsets[self.n_train - self.starts[shard]] - offsets[0]
        return tokens

    @cached_property
    def rows_per_epoch(self) -> int:
        return int(self.train_tokens.sum()) // self.read.span

    @property
    def span(self) -> int:
        return self.read.span

    def settle(self) -> None:
        """Wait for the shard loads in flight (forked DataLoader workers inherit them)."""
        self.fetcher.settle()

    @property
    def bytes_per_token(self) -> float:
        """Text bytes per stored token (bits per byte from a loss in nats per token)."""
        total = int(self.shard_tokens.sum())
        return self.snap.lineage.get("text_bytes", 0) / total if total else 0.0

    @lru_cache(maxsize=2)  # noqa: B019 - this epoch's plan and the next, owned by this object
    def plan(self, epoch: int) -> _Plan:
        r = self.read
        order = EpochOrder(tuple(self.counts), r.seed, epoch, r.shuffle, r.block_shards)
        seq = order.shard_sequence
        blocks = [seq[lo : lo + r.block_shards] for lo in range(0, len(seq), r.block_shards)]
        sizes = [int(self.train_tokens[b].sum()) for b in blocks]
        block_of = np.empty(len(seq), dtype=np.int64)
        for index, block in enumerate(blocks):
            block_of[block] = index
        return _Plan(order, blocks, np.concatenate([[0], np.cumsum(sizes)]), block_of)

    # --- rows --------------------------------------------------------------------------

    def train_rows(self, rows: np.ndarray, sparse: bool = False) -> np.ndarray:
        """Global training rows (running on across epochs) as a [len(rows), span] array.

        ``sparse``: a block not packed yet is not packed for these rows: its shards' offsets
        say where the rows are, and only the record batches they read are decoded (a resumed
        run's first batch, at a fraction of the cost; the rows are the same)."""
        span = self.read.span
        out = np.empty((len(rows), span), dtype=np.int64)
        with self._lock:
            for i, row in enumerate(np.asarray(rows, dtype=np.int64)):
                epoch, r = divmod(int(row), self.rows_per_epoch)
                out[i] = self._slice(epoch, self.packed_row(epoch, r) * span, span, sparse)
        return out

    def packed_row(self, epoch: int, row: int) -> int:
        """The packed row that epoch row ``row`` reads: rows are shuffled inside their block.

        Consecutive rows of the stream are consecutive pieces of the same documents, so a step
        of them would see one or two documents; a seeded permutation of each block's rows
        (the row that runs into the next block stays last) gives a step rows from all over the
        block, still reading one block at a time and every row once an epoch."""
        if not self.read.shuffle:
            return row
        plan, span = self.plan(epoch), self.read.span
        block = int(np.searchsorted(plan.cum, row * span, side="right")) - 1
        first = -(-int(plan.cum[block]) // span)  # the first row starting in the block
        count = -(-int(plan.cum[block + 1]) // span) - first - 1  # its rows but the last
        if row - first >= count:
            return row
        return first + int(self._row_order(epoch, block, count)[row - first])

    @lru_cache(maxsize=4)  # noqa: B019 - the blocks being read, owned by this object
    def _row_order(self, epoch: int, block: int, count: int) -> np.ndarray:
        return np.random.default_rng([self.read.seed, epoch, block]).permutation(count)

    def val_rows(self, rows: np.ndarray) -> np.ndarray:
        """Held-out rows (cycling); the training rows when nothing long enough is held out."""
        with self._lock:
            stream, span = self._val_stream, self.read.span
        if len(stream) < span:
            return self.train_rows(rows)
        starts = (np.asarray(rows, dtype=np.int64) % (len(stream) // span)) * span
        return stream[starts[:, None] + np.arange(span)].astype(np.int64)

    @cached_property
    def _val_stream(self) -> np.ndarray:
        """The held-out tail's tokens in index order (a small fraction of the corpus)."""
        pieces = [values[offsets[0] : offsets[-1]] for offsets, values in self._val_documents()]
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)

    def _val_documents(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(document offsets, token values) of each shard's held-out documents, in order."""
        for shard in np.flatnonzero(self.starts + self.counts > self.n_train):
            offsets, values = self._tokens(int(shard), lambda s: float("inf"), set())
            yield offsets[max(0, self.n_train - int(self.starts[shard])) :], values

    # --- document starts (data.document_mask) -------------------------------------------

    def train_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        """Whether a document starts at each position of :meth:`train_rows`' rows."""
        span = self.read.span
        out = np.zeros((len(rows), span), dtype=bool)
        with self._lock:
            for i, row in enumerate(np.asarray(rows, dtype=np.int64)):
                epoch, r = divmod(int(row), self.rows_per_epoch)
                out[i] = self._doc_starts(epoch, self.packed_row(epoch, r) * span, span)
        return out

    def val_doc_starts(self, rows: np.ndarray) -> np.ndarray:
        """Whether a document starts at each position of :meth:`val_rows`' rows."""
        with self._lock:
            stream, span = self._val_stream, self.read.span
            if len(stream) < span:
                return self.train_doc_starts(rows)
            flags = self._val_starts
        starts = (np.asarray(rows, dtype=np.int64) % (len(stream) // span)) * span
        return flags[starts[:, None] + np.arange(span)]

    @cached_property
    def _val_starts(self) -> np.ndarray:
        """Document-start flags of the held-out stream (each held-out document's first token)."""
        flags, at = np.zeros(len(self._val_stream), dtype=bool), 0
        for offsets, _ in self._val_documents():
            flags[at + offsets[:-1] - offsets[0]] = True
            at += int(offsets[-1] - offsets[0])
        return flags

    def _doc_starts(self, epoch: int, start: int, length: int) -> np.ndarray:
        """Document-start flags of tokens ``[start, start + length)`` of ``epoch``'s stream."""
        plan, end = self.plan(epoch), start + length
        flags = np.zeros(length, dtype=bool)
        first = int(np.searchsorted(plan.cum, start, side="right")) - 1
        last = int(np.searchsorted(plan.cum, end - 1, side="right")) - 1
        for block in range(first, last + 1):
            if (epoch, block) not in self._doc_ends:
                self._block(epoch, block)
            ends = self._doc_ends[(epoch, block)]
            begins = int(plan.cum[block]) + np.concatenate([[0], ends[:-1]]).astype(np.int64)
            flags[begins[(begins >= start) & (begins < end)] - start] = True
        return flags

    def _slice(self, epoch: int, start: int, length: int, sparse: bool = False) -> np.ndarray:
        """Tokens ``[start, start + length)`` of ``epoch``'s stream, across blocks."""
        plan = self.plan(epoch)
        pieces = []
        block = int(np.searchsorted(plan.cum, start, side="right")) - 1
        while length > 0:
            lo = start - int(plan.cum[block])
            if sparse and (epoch, block) not in self._blocks:
                piece = self._sparse_block(epoch, block).piece(lo, length)
            else:
                piece = self._block(epoch, block)[lo : lo + length]
            pieces.append(piece if len(piece) == length else piece.copy())  # frees the block
            start, length, block = start + len(piece), length - len(piece), block + 1
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def _block(self, epoch: int, block: int) -> np.ndarray:
        """Block ``block`` of ``epoch``: its training documents' tokens in the epoch's order."""
        key = (epoch, block)
        if key in self._blocks:
            self._blocks.move_to_end(key)
            if self._pid != os.getpid():  # a forked worker inherited the block: its look-ahead
                self._look_ahead(epoch, block)
            return self._blocks[key]
        while len(self._blocks) >= BLOCKS_KEPT:  # before building: one block's memory at a time
            self._blocks.popitem(last=False)
        current, next_use = self._look_ahead(epoch, block)
        shard_of, row_of = self._documents(epoch, block)
        arrays = {s: self._tokens(s, next_use, current) for s in sorted(current)}
        pieces = [
            arrays[s][1][arrays[s][0][r] : arrays[s][0][r + 1]]
            for s, r in zip(shard_of.tolist(), row_of.tolist(), strict=True)
        ]
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        self._blocks[key] = tokens
        self._sparse.clear()  # a first batch's sparse reads are done with
        self._doc_ends[key] = np.cumsum([len(p) for p in pieces], dtype=np.int64)
        while len(self._doc_ends) > DOC_ENDS_KEPT:
            self._doc_ends.popitem(last=False)
        return tokens

    def _sparse_block(self, epoch: int, block: int) -> _Sparse:
        """Block ``block`` of ``epoch`` as :class:`_Sparse`: its shards' offsets are read, not
        their tokens. In this thread: on a busy machine, starting pool threads to check and
        index the shards side by side cost more than it saved."""
        key = (epoch, block)
        if key not in self._sparse:
            current, next_use = self._uses(epoch, block)
            shard_of, row_of = self._documents(epoch, block)
            needed = sorted(set(shard_of.tolist()))
            index = {s: self._index(s, next_use, current) for s in needed}
            lengths = np.zeros(len(shard_of), dtype=np.int64)
            for shard, ix in index.items():
                mine = shard_of == shard
                lengths[mine] = np.diff(ix.offsets)[row_of[mine]]
            self._sparse[key] = _Sparse(shard_of, row_of, np.cumsum(lengths), index)
            while len(self._sparse) > 2:  # a row crossing into the next block reads both
                self._sparse.popitem(last=False)
        return self._sparse[key]

    def _documents(self, epoch: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row) of each training document of the block, in the epoch's order."""
        plan = self.plan(epoch)
        lo, hi = _positions(plan.order, plan.blocks[block])
        ids = plan.order.samples[lo:hi]
        return plan.order.locate(ids[ids < self.n_train])

    def _index(self, shard: int, next_use, protect: set[int]) -> ShardIndex | RangedIndex:
        """One token shard's index, its dtype checked: from its sidecar where it has one (its
        values then read by range), else from its whole checked bytes."""
        where = self.snap.shards[shard].key

        def whole() -> ShardIndex:
            return ShardIndex(self.fetcher.verified(shard, next_use, protect), where)

        index: ShardIndex | RangedIndex | None = None
        data = self.fetcher.sidecar(shard, next_use, protect)
        if data is not None:
            ranges = functools.partial(self.fetcher.read_range, shard)
            with contextlib.suppress(DataError):  # a format this version cannot read
                index = RangedIndex(data, where, ranges, whole)
        if index is None:
            index = whole()
        check_dtype(index.dtype, self.read.vocab_size, where, self.read.rebuild)
        return index

    def _uses(self, epoch: int, block: int) -> tuple[set[int], Callable[[int], float]]:
        """The shards of ``block`` and when each shard is next needed (the tiers evict the
        furthest first)."""
        plan = self.plan(epoch)

        def next_use(shard: int) -> float:
            at = int(plan.block_of[shard])
            return float(at) if at >= block else float("inf")

        return {int(s) for s in plan.blocks[block]}, next_use

    def _look_ahead(self, epoch: int, block: int) -> tuple[set[int], Callable[[int], float]]:
        """Load the shards of ``block`` and prefetch the next ones; returns :meth:`_uses`."""
        plan = self.plan(epoch)
        current, next_use = self._uses(epoch, block)
        upcoming = [int(s) for b in plan.blocks[block:] for s in b]
        self.fetcher.prefetch(upcoming, next_use, current, len(current))
        return current, next_use

    def _tokens(self, shard: int, next_use, protect: set[int]) -> tuple[np.ndarray, np.ndarray]:
        """(document offsets, token values) of one token shard, its dtype checked."""
        table = self.fetcher.table(shard, next_use, protect)
        chunks = table.column(0)
        # one chunk (a shard is one record batch) is used in place: combining copies it
        column = chunks.chunk(0) if chunks.num_chunks == 1 else chunks.combine_chunks()
        where = self.snap.shards[shard].key
        check_dtype(
            np.dtype(str(column.type.value_type)), self.read.vocab_size, where, self.read.rebuild
        )
        return _view(column.offsets), _view(column.values)

    def __getstate__(self) -> dict:
        """Pickled into a spawned data-loader worker: it opens its own fetcher and lock."""
        return {**self.__dict__, "_fetcher": None, "_lock": None, "_sparse": OrderedDict()}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.RLock())

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()


def _positions(order: EpochOrder, block: np.ndarray) -> tuple[int, int]:
    """Reading positions ``[lo, hi)`` of one block's documents in the epoch order."""
    first, end = order.block_spans
    return int(first[block[0]]), int(end[block[0]])


def _view(array: pa.Array) -> np.ndarray:
    """A numeric Arrow array's values as a numpy view. ``Array.to_numpy`` would import pandas
    (seconds, in every data-loader worker) for the first shard of each process."""
    dtype = np.dtype(str(array.type))
    if not len(array):
        return np.zeros(0, dtype)
    return np.frombuffer(
        array.buffers()[1], dtype, count=len(array), offset=array.offset * dtype.itemsize
    )
