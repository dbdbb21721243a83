"""Chunks, manifests and the store: atomic commit, checksums, torn and corrupt detection,
retention, incremental bytes."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_core.checkpoint.chunks import ChunkStore, CorruptCheckpoint, chunk_key
from xirang_core.checkpoint.manifest import MANIFEST_FILE, Manifest, step_dir
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.storage.tier import FsspecTier


def memory_tier(name: str) -> FsspecTier:
    fs = fsspec.filesystem("memory")
    root = f"/ckpt-tests/{name}"
    if fs.exists(root):
        fs.rm(root, recursive=True)
    return FsspecTier(fs, root)


def commit(store: CheckpointStore, step: int, payload: bytes) -> Manifest:
    record, new = store.chunks.put(payload)
    manifest = Manifest(step=step, files={"data": record}, world_size=1, bytes_new=new)
    store.commit(manifest)
    return manifest


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), chunk=st.integers(1, 700))
def test_chunked_file_reads_back_exactly(data: bytes, chunk: int) -> None:
    chunks = ChunkStore(memory_tier("roundtrip"), chunk_bytes=chunk)
    record, new = chunks.put(data)
    assert bytes(chunks.get("f", record)) == data
    assert chunks.get("f", record).stream().read() == data
    assert new <= len(data)
    assert chunks.put(data)[1] == 0  # the same bytes again cost nothing


@settings(max_examples=40, deadline=None)
@given(
    data=st.binary(min_size=64, max_size=4000),
    chunk=st.integers(8, 512),
    where=st.integers(0, 10**6),
)
def test_incremental_put_writes_only_changed_chunks(data: bytes, chunk: int, where: int) -> None:
    chunks = ChunkStore(memory_tier("incremental"), chunk_bytes=chunk)
    chunks.put(data)
    pos = where % len(data)
    changed = data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]
    _, new = chunks.put(changed)
    assert 0 < new <= chunk


@settings(max_examples=30, deadline=None)
@given(where=st.integers(0, 10**6))
def test_any_flipped_manifest_byte_is_detected(where: int) -> None:
    store = CheckpointStore(memory_tier("flip"), chunk_bytes=64)
    commit(store, 5, b"x" * 300)
    key = f"{step_dir(5)}/{MANIFEST_FILE}"
    raw = bytearray(store.tier.read(key))
    raw[where % len(raw)] ^= 0x01
    store.tier.write(key, bytes(raw))
    with pytest.raises(CorruptCheckpoint):
        store.manifest(5)


def test_corrupt_or_truncated_chunk_is_named() -> None:
    store = CheckpointStore(memory_tier("corrupt"), chunk_bytes=100)
    manifest = commit(store, 1, bytes(range(250)))
    digest = manifest.files["data"].chunks[1]
    store.tier.write(chunk_key(digest), b"truncated")
    with pytest.raises(CorruptCheckpoint, match=f"chunk {digest[:12]} fails its checksum"):
        store.verify(manifest)
    store.tier.evict(chunk_key(digest))
    with pytest.raises(CorruptCheckpoint, match="missing"):
        store.read_files(manifest)


def test_a_save_without_manifest_does_not_count(tmp_path: Path) -> None:
    store = CheckpointStore.at(str(tmp_path))
    commit(store, 10, b"good")
    store.chunks.put(b"orphan bytes of a save that died")
    (tmp_path / step_dir(20)).mkdir()
    (tmp_path / step_dir(20) / f"{MANIFEST_FILE}.partial").write_text('{"step": 2')
    cands = list(store.candidates())
    assert [c.step for c in cands] == [20, 10]
    assert cands[0].manifest is None and "torn" in cands[0].problem
    assert cands[1].manifest is not None


def test_retention_keeps_last_k_and_marked_and_collects_chunks() -> None:
    store = CheckpointStore(memory_tier("retain"), chunk_bytes=16)
    for step in range(1, 7):
        commit(store, step, f"state of step {step} ".encode() * 4)
    store.mark(2)
    removed = store.retain(keep_last=2, keep_every=3)
    assert removed == [4, 1]
    assert [c.step for c in store.candidates()] == [6, 5, 3, 2]
    live = set().union(*(store.manifest(s).chunks() for s in (6, 5, 3, 2)))
    on_disk = {k.rsplit("/", 1)[-1] for k in store.tier.list("chunks")}
    assert on_disk == live
    for step in (6, 5, 3, 2):
        store.verify(store.manifest(step))


def test_marking_an_unknown_step_is_refused() -> None:
    store = CheckpointStore(memory_tier("mark"))
    with pytest.raises(CorruptCheckpoint):
        store.mark(7)
