"""Token shards: a text snapshot tokenised once into a derived snapshot of token arrays.

A token snapshot lives under ``<dataset root>/tokens`` (its own ``shards/`` and ``snapshots/``),
one token shard per text shard and in the same order: an Arrow IPC file with one column,
``tokens``, a list of ids per document in the smallest unsigned type that holds the vocabulary
(the list offsets are the document offsets), zstd-compressed where that saves a tenth or more.
Its lineage (source snapshot, tokenizer, fingerprint, vocabulary, tokens per shard) is part of
its content id, so a run names exactly the tokens it trains on and another tokenizer's tokens
are never mistaken for its own. Text shards are tokenised in worker processes with a few in
flight, so memory holds a few shards whatever the corpus size; shards and the manifest are
written by atomic renames, the manifest last, so an interrupted run leaves nothing a reader sees.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import multiprocessing
import posixpath
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xirang import DataError
from xirang.data import FsspecTier
from xirang.specs import Tokenizer
from xirang_data import shards
from xirang_data.prepare import write_shard_bytes
from xirang_data.shard_index import sidecar
from xirang_data.shards import ShardInfo
from xirang_data.snapshot import Snapshot, list_ids, load, save

TOKENS_DIR = "tokens"
COLUMN = "tokens"
KIND = "tokens"
#: text snapshots up to this many stored bytes are tokenised by the run itself when needed
AUTO_TOKENIZE_BYTES = 64 * 2**20
#: zstd is kept only when it saves at least this fraction of the raw bytes
MIN_SAVING = 0.1
#: tokens a record batch holds (whole documents): a resumed run's first batch decodes only the
#: record batches its rows read (shard_index.py), about this many tokens each
BATCH_TOKENS = 2**16
#: tokenizers rebuilt in this process, by their recipe
_TOKENIZERS: dict[str, Tokenizer] = {}


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type whose range holds ids ``0 .. vocab_size - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def tokens_tier(tier: FsspecTier) -> FsspecTier:
    """The folder of ``tier``'s token snapshots: ``<root>/tokens``."""
    clone = copy.copy(tier)
    clone.root = posixpath.join(tier.root, TOKENS_DIR)
    return clone


def rebuild_command(uri: str, source: str, tokenizer: str) -> str:
    return f"xirang data tokenize {uri} --snapshot {source} --tokenizer {tokenizer}"


@dataclass(frozen=True)
class Recipe:
    """What a worker process needs to tokenise one shard (all of it pickles)."""

    tokenizer: dict[str, Any]  # {"tokenizer": section, "runtime": {"tokenizer": runtime}}
    field: str
    dtype: str


def tokenize_snapshot(
    src: FsspecTier,
    snap: Snapshot,
    tokenizer: Tokenizer,
    tokenizer_config: dict[str, Any],
    workers: int = 0,
    progress: bool = False,
    field: str = "text",
) -> Snapshot:
    """Write the token snapshot of ``snap`` under ``<root>/tokens``; returns it.

    ``tokenizer_config`` is the run config's ``tokenizer`` and ``runtime.tokenizer`` sections,
    from which each worker process rebuilds the tokenizer (0 workers: this process does it)."""
    dtype = token_dtype(tokenizer.vocab_size)
    recipe = Recipe(tokenizer_config, field, dtype.name)
    _TOKENIZERS[json.dumps(tokenizer_config, sort_keys=True, default=str)] = tokenizer
    dst = tokens_tier(src)
    infos, counts, text_bytes = [], [], 0
    with _pool(workers) as pool, _progress(progress, len(snap.shards)) as tick:
        for info, n_tokens, n_bytes in _in_order(pool, src, dst, snap.shards, recipe, workers):
            infos.append(info)
            counts.append(n_tokens)
            text_bytes += n_bytes
            tick()
    lineage = {
        "kind": KIND,
        "source": snap.id,
        "tokenizer": tokenizer.name,
        "fingerprint": tokenizer.fingerprint,
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "field": field,
        "shard_tokens": counts,
        "text_bytes": text_bytes,
    }
    token_snap = Snapshot({COLUMN: f"list<item: {dtype.name}>"}, tuple(infos), lineage=lineage)
    save(dst, token_snap)
    return token_snap


def _in_order(
    pool: Executor | None,
    src: FsspecTier,
    dst: FsspecTier,
    infos: tuple[ShardInfo, ...],
    recipe: Recipe,
    workers: int,
) -> Iterator[tuple[ShardInfo, int, int]]:
    """Each shard's result in index order, with at most two shards per worker in flight."""
    if pool is None:
        yield from (tokenize_shard(src, dst, info, recipe) for info in infos)
        return
    pending: list[Future] = []
    for info in infos:
        pending.append(pool.submit(tokenize_shard, src, dst, info, recipe))
        if len(pending) >= 2 * workers:
            yield pending.pop(0).result()
    yield from (f.result() for f in pending)


def tokenize_shard(
    src: FsspecTier, dst: FsspecTier, info: ShardInfo, recipe: Recipe
) -> tuple[ShardInfo, int, int]:
    """One text shard to one token shard; returns its entry, its tokens and its text bytes."""
    from xirang.data import open_tokenizer

    data = src.read(info.key)
    if not shards.checksum_ok(data, info):
        raise DataError(f"shard {info.key} at {src.root} fails its checksum; not tokenised")
    column = shards.decode(data, info.key).column(recipe.field)
    key = json.dumps(recipe.tokenizer, sort_keys=True, default=str)
    if key not in _TOKENIZERS:  # once per process, not once per shard
        _TOKENIZERS[key] = open_tokenizer(recipe.tokenizer)
    ids = _TOKENIZERS[key].encode_batch(column.to_pylist())
    table = token_table(ids, np.dtype(recipe.dtype))
    n_bytes = pc.sum(pc.binary_length(column)).as_py() or 0
    return write_token_shard(dst, table), len(table.column(0).chunk(0).values), n_bytes


def token_table(docs: Sequence[Sequence[int] | np.ndarray], dtype: np.dtype) -> pa.Table:
    """Documents' ids as one list column: values in ``dtype``, offsets per document."""
    lengths = np.fromiter((len(d) for d in docs), np.int64, count=len(docs))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.fromiter(itertools.chain.from_iterable(docs), dtype, count=int(offsets[-1]))
    return pa.table({COLUMN: pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))})


def write_token_shard(dst: FsspecTier, table: pa.Table) -> ShardInfo:
    """Store a token shard, zstd-compressed only where that pays, and its sidecar index (a
    resume reads its first rows by range through it; shard_index.py)."""
    offsets = table.column(0).chunk(0).offsets
    starts = batch_starts(offsets, BATCH_TOKENS) if table.num_rows else None
    data, info = shards.encode(table, "shards", batch_rows=starts)
    if len(data) > (1 - MIN_SAVING) * table.nbytes:
        data, info = shards.encode(table, "shards", compression=None, batch_rows=starts)
    index = sidecar(data, info.key)
    info = replace(info, index_bytes=len(index), index_sha256=hashlib.sha256(index).hexdigest())
    write_shard_bytes(dst, data, info)
    assert info.sidecar is not None
    write_shard_bytes(dst, index, info.sidecar)
    return info


def batch_starts(offsets: pa.Array, tokens: int) -> list[int]:
    """First document of each record batch: a batch closes once it holds ``tokens``."""
    ends = np.frombuffer(offsets.buffers()[1], np.int32, len(offsets), offsets.offset)
    starts, at = [0], 0
    while True:
        at = int(np.searchsorted(ends, int(ends[at]) + tokens, side="left"))
        if at >= len(ends) - 1:
            return starts
        starts.append(at)


def find(src: FsspecTier, snap: Snapshot, tokenizer: Tokenizer) -> Snapshot | None:
    """The token snapshot of ``snap`` in ``tokenizer``, if one was written."""
    tier = tokens_tier(src)
    for token_id in reversed(list_ids(tier)):
        lineage = load(tier, token_id).lineage
        if lineage.get("source") == snap.id and lineage.get("fingerprint") == tokenizer.fingerprint:
            return load(tier, token_id)
    return None


def open_tokens(src: FsspecTier, token_id: str, tokenizer: Tokenizer, uri: str) -> Snapshot:
    """The pinned token snapshot, refused unless its tokens are the run tokenizer's."""
    snap = load(tokens_tier(src), token_id)
    lineage = snap.lineage
    rebuild = rebuild_command(uri, lineage.get("source", "ID"), tokenizer.name)
    if lineage.get("kind") != KIND:
        raise DataError(f"snapshot {token_id} in {uri}/tokens holds no token shards; {rebuild}")
    if lineage.get("fingerprint") != tokenizer.fingerprint:
        raise DataError(
            f"token snapshot {token_id} was made by tokenizer {lineage.get('tokenizer')} "
            f"(hash {lineage.get('fingerprint')}), not this run's {tokenizer.name} (hash "
            f"{tokenizer.fingerprint}); rebuild it with `{rebuild}`"
        )
    check_dtype(np.dtype(lineage.get("dtype", "uint8")), tokenizer.vocab_size, token_id, rebuild)
    return snap


def check_dtype(dtype: np.dtype, vocab: int, where: str, rebuild: str) -> None:
    """Refuse token storage whose type cannot hold every id of a ``vocab``-id tokenizer."""
    if dtype.kind not in "ui" or np.iinfo(dtype).max + 1 < vocab:
        raise DataError(
            f"token shards of {where} are stored as {dtype}, which cannot hold a vocabulary of "
            f"{vocab} ids (needs {token_dtype(vocab)}); rebuild them with `{rebuild}`"
        )


def _pool(workers: int):
    """Worker processes (spawned: the parent may run threads), or none for in-process work."""
    if workers <= 0:
        return _nothing()
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


@contextmanager
def _progress(show: bool, total: int) -> Iterator[Callable[[], None]]:
    if not show:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = ("tokenising shards", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("tokenize", total=total)
        yield lambda: progress.advance(task)
