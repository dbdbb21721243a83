"""A resumed run's first batch read by range: token shards carry a sidecar index the manifest
vouches for; the rows read through it are the packed ones, from a fraction of the shards'
bytes, locally and from S3; a bad sidecar or range is never used, sync carries the sidecars,
and a snapshot written before them resumes exactly as it did."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_data import shards, token_shards
from xirang_data.shard_index import RangedIndex, ShardIndex, sidecar
from xirang_data.snapshot import Snapshot, list_ids, load, save
from xirang_data.sync import sync, verify
from xirang_data.token_shards import tokens_tier
from xirang_data.training import resolve_dataset, run_batches

from tests.conftest import require_moto_server
from tests.data.conftest import Make
from tests.data.test_training import config
from xirang.specs import thaw
from xirang.storage.locate import tier_for
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.errors import DataError
from xirang_core.plugins import get_registry
from xirang_core.storage.tier import FsspecTier

BUCKET = "xirang-ranged"


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    batch_tokens=st.integers(1, 90),
    compression=st.sampled_from(["zstd", None]),
    data=st.data(),
)
def test_a_sidecar_index_reads_by_range_what_the_whole_shard_holds(
    lengths: list[int], batch_tokens: int, compression: str | None, data: st.DataObject
) -> None:
    docs = [[(7 * d + i) % 251 for i in range(n)] for d, n in enumerate(lengths)]
    table = token_shards.token_table(docs, np.dtype(np.uint8))
    starts = token_shards.batch_starts(table.column(0).chunk(0).offsets, batch_tokens)
    raw, info = shards.encode(table, compression=compression, batch_rows=starts)
    reads: list[tuple[int, int]] = []

    def read_range(start: int, end: int) -> bytes:
        reads.append((start, end))
        return raw[start:end]

    index = RangedIndex(sidecar(raw, info.key), info.key, read_range, pytest.fail)
    assert index.offsets.tolist() == np.concatenate([[0], np.cumsum(lengths)]).tolist()
    lo = data.draw(st.integers(0, int(index.offsets[-1])))
    hi = data.draw(st.integers(lo, int(index.offsets[-1])))
    assert index.values(lo, hi).tolist() == [t for d in docs for t in d][lo:hi]
    assert sum(end - start for start, end in reads) <= len(raw)


def test_a_bad_range_is_never_decoded_the_whole_checked_shard_is() -> None:
    docs = [list(range(i, i + 30)) for i in range(20)]
    table = token_shards.token_table(docs, np.dtype(np.uint8))
    starts = token_shards.batch_starts(table.column(0).chunk(0).offsets, 50)
    raw, info = shards.encode(table, compression=None, batch_rows=starts)
    flipped = bytearray(raw)
    at, length, _ = ShardIndex(raw, info.key).value_ranges[1]
    flipped[at + length // 2] ^= 0xFF  # a byte of the second record batch's values
    wholes: list[int] = []

    def whole() -> ShardIndex:
        wholes.append(1)
        return ShardIndex(raw, info.key)

    index = RangedIndex(sidecar(raw, info.key), info.key, lambda s, e: bytes(flipped[s:e]), whole)
    assert index.values(0, 600).tolist() == [t for d in docs for t in d]
    assert wholes == [1]  # read whole once, on the first bad range


def token_snapshot(tier: FsspecTier) -> tuple[FsspecTier, Snapshot]:
    tokens = tokens_tier(tier)
    return tokens, load(tokens, list_ids(tokens)[-1])


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token shards of several record batches each, as a real corpus's are."""
    monkeypatch.setattr(token_shards, "BATCH_TOKENS", 40)


def first_batch(
    uri: str, step: int, cache: str = "", **storage
) -> tuple[np.ndarray, np.ndarray, int]:
    """A fresh reader's sparse first batch of ``step``, the packed one, and the bytes the
    sparse read took from the origin (``cache``: the disk cache folder, none when empty)."""
    cfg = config(uri, shuffle_block=2, cache_dir=cache)
    if storage:
        cfg["storage"] = storage
    fresh, _ = run_batches(cfg, 0, 1, 5, 2)
    positions = fresh.positions(step, 1)
    sparse = fresh.rows(positions, sparse=True)
    taken = fresh.sources[0].source.fetcher.origin_bytes
    packed, _ = run_batches(cfg, 0, 1, 5, 2)
    return sparse, packed.rows(positions), taken


@pytest.mark.usefixtures("small_batches")
def test_a_resume_reads_its_first_rows_by_range(make_dataset: Make) -> None:
    tier, _ = make_dataset(n=160, per_shard=40)
    run_batches(config(tier.root), 0, 1, 5, 2)  # tokenises
    tokens, snap = token_snapshot(tier)
    assert all(i.sidecar is not None and tokens.exists(i.sidecar.key) for i in snap.shards)
    for step in (1, 4, 9):
        sparse, packed, taken = first_batch(tier.root, step)
        assert np.array_equal(sparse, packed)
        assert 0 < taken < snap.bytes / 2  # not the shards whole: their ranges and sidecars


def flip_byte(path: Path, at: int) -> None:
    """Corrupt one byte of the file at ``path`` in place (``at`` may count from the end)."""
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.usefixtures("small_batches")
def test_a_bad_sidecar_or_range_is_never_used(make_dataset: Make) -> None:
    tier, _ = make_dataset(n=160, per_shard=40)
    run_batches(config(tier.root), 0, 1, 5, 2)
    tokens, snap = token_snapshot(tier)
    good, _, _ = first_batch(tier.root, 3)
    for info in snap.shards:  # sidecars that lie about the offsets: refused by their hash
        assert info.sidecar is not None
        flip_byte(Path(tokens.path(info.sidecar.key)), -40)
    again, _, taken = first_batch(tier.root, 3)
    assert np.array_equal(again, good) and taken >= snap.bytes / 2  # read whole instead
    for info in snap.shards:  # values that differ from the hashed ones, at the origin itself
        path = Path(tokens.path(info.key))
        flip_byte(path, path.stat().st_size // 2)
    with pytest.raises(DataError, match="is corrupt or truncated at the origin"):
        first_batch(tier.root, 3)


@pytest.mark.usefixtures("small_batches")
def test_a_snapshot_without_sidecars_resumes_exactly(make_dataset: Make) -> None:
    tier, _ = make_dataset(n=160, per_shard=40)
    run_batches(config(tier.root), 0, 1, 5, 2)
    tokens, snap = token_snapshot(tier)
    with_sidecars, _, _ = first_batch(tier.root, 5)
    for info in snap.shards:
        assert info.sidecar is not None
        tokens.evict(info.sidecar.key)
    old = Snapshot(
        snap.schema,
        tuple(replace(i, index_bytes=0, index_sha256="") for i in snap.shards),
        meta=snap.meta,
        lineage=snap.lineage,
    )
    tokens.evict(f"snapshots/{snap.id}.json")
    save(tokens, old)
    assert "index_sha256" not in tokens.read(f"snapshots/{old.id}.json").decode()
    sparse, packed, _ = first_batch(tier.root, 5)
    assert np.array_equal(sparse, packed) and np.array_equal(sparse, with_sidecars)


@pytest.mark.usefixtures("small_batches")
def test_sync_carries_the_sidecars_and_verify_checks_them(
    make_dataset: Make, tmp_path: Path
) -> None:
    tier, _ = make_dataset(n=80, per_shard=40)
    run_batches(config(tier.root), 0, 1, 5, 2)
    tokens, snap = token_snapshot(tier)
    copy = tier_for(str(tmp_path / "copy"))
    sync(tokens, copy, snap.id)
    sidecars = [i.sidecar for i in snap.shards if i.sidecar is not None]
    assert len(sidecars) == len(snap.shards)
    for side in sidecars:
        assert hashlib.sha256(copy.read(side.key)).hexdigest() == side.sha256
    copy.write(sidecars[0].key, b"not the index")
    assert verify(copy, snap.id) == (snap.id, [sidecars[0].key])
    assert sync(tokens, copy, snap.id).replaced == 1
    assert verify(copy, snap.id) == (snap.id, [])


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    from xirang.storage.local_s3 import local_s3

    require_moto_server()
    with local_s3(BUCKET) as url:
        yield url


@pytest.mark.usefixtures("small_batches")
def test_a_resume_from_s3_reads_its_first_rows_by_ranged_gets(
    make_dataset: Make, s3: str, tmp_path: Path
) -> None:
    local, _ = make_dataset(n=160, per_shard=40)
    storage = {"name": "s3", "root": "", "endpoint_url": s3, "region": "", "profile": ""}
    cfg = {**config(local.root), "storage": storage, "model": {"vocab_size": 0}}
    resolve_dataset(cfg["data"], storage)
    token_id = thaw(resolve_tokenizer(cfg, get_registry())[1])["runtime"]["tokens"][0]
    uri = f"s3://{BUCKET}/ranged"
    sync(local, tier_for(uri, storage))
    sync(tokens_tier(local), tokens_tier(tier_for(uri, storage)), token_id)
    snap = load(tokens_tier(tier_for(uri, storage)), token_id)
    cache = str(tmp_path / "cache")
    sparse, packed, taken = first_batch(uri, 4, cache, **storage)
    assert np.array_equal(sparse, packed)
    assert 0 < taken < snap.bytes / 2  # ranged GETs, not the shards whole
    again, _, taken = first_batch(uri, 4, cache, **storage)  # the block's shards are cached
    assert np.array_equal(again, packed) and taken == 0  # ranges of the cached files
