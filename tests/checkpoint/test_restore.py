"""The fast restore path: raw tensor files, XXH3 chunk checks, optimizer state seeded from the
checkpoint instead of a warm-up step. Each result must equal what was saved, exactly."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fsspec
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import _StorageInfo

from tests.checkpoint.helpers import build, manager, train_step
from xirang_core.checkpoint.chunks import ChunkStore, CorruptCheckpoint, chunk_key
from xirang_core.checkpoint.manifest import MANIFEST_FILE, Manifest, step_dir
from xirang_core.checkpoint.memfs import MemoryFileSystem, memory_reader, memory_writer
from xirang_core.checkpoint.rawdcp import _archive, _storage_range, _Whole
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.storage.tier import FsspecTier


def saved_objects(saved: dict) -> MemoryFileSystem:
    """``saved`` written as a checkpoint writes it: items as objects of a chunk store, then
    the DCP files as a restore hands them to DCP's reader."""
    fs = MemoryFileSystem()
    chunks = ChunkStore(FsspecTier(fsspec.filesystem("memory"), f"/objects-{id(saved)}"))
    writer = memory_writer(fs, chunks)
    dcp.save(saved, storage_writer=writer, no_dist=True)
    assert writer.records and all(n.startswith("../chunks/") for n in writer.records)
    objects = {name: chunks.get(name, record) for name, record in writer.records.items()}
    return MemoryFileSystem({**fs.files(), **objects})


def test_items_round_trip_any_dtype_and_shape() -> None:
    saved = {
        "bf16": torch.randn(7, 5).to(torch.bfloat16),
        "scalar": torch.tensor(3.5),
        "ints": torch.arange(24, dtype=torch.int64).reshape(2, 3, 4),
        "empty": torch.empty(0, 3),
        "transposed": torch.randn(4, 6).t(),  # a view: saved as its elements, in order
        "slice": torch.randn(10, 3)[2:5],  # a view into a larger storage
        "extra": {"note": "bytes go through too", "n": 4},
    }
    fs = saved_objects(saved)
    loaded = {k: torch.zeros_like(v) if torch.is_tensor(v) else None for k, v in saved.items()}
    loaded["extra"] = {"note": "", "n": 0}
    dcp.load(loaded, storage_reader=memory_reader(fs), no_dist=True)
    for key, value in saved.items():
        if torch.is_tensor(value):
            assert torch.equal(loaded[key], value) and loaded[key].dtype == value.dtype
    assert loaded["extra"] == saved["extra"]


def test_a_non_contiguous_target_is_filled_exactly() -> None:
    saved = {"w": torch.randn(6, 4)}
    fs = saved_objects(saved)
    target = torch.zeros(4, 6).t()  # a transposed view: not contiguous
    dcp.load({"w": target}, storage_reader=memory_reader(fs), no_dist=True)
    assert torch.equal(target, saved["w"])


def test_restore_seeds_optimizer_state_and_matches_every_tensor(tmp_path: Path) -> None:
    model, optim = build()
    mgr = manager(str(tmp_path), model, optim, async_save=False)
    for step in (1, 2, 3):
        train_step(model, optim, step)
    mgr.save(3)
    fresh, fresh_optim = build(seed=9)
    assert not fresh_optim.state
    assert manager(str(tmp_path), fresh, fresh_optim).restore() == 4
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)
        assert b.grad is None  # no warm-up step left gradients behind
    pairs = zip(optim.param_groups[0]["params"], fresh_optim.param_groups[0]["params"], strict=True)
    for p, q in pairs:
        saved, restored = optim.state[p], fresh_optim.state[q]
        assert saved.keys() == restored.keys()
        for key in saved:
            assert torch.equal(saved[key], restored[key]), key


def local_store(root: Path) -> CheckpointStore:
    return CheckpointStore.at(str(root), chunk_bytes=64)


def test_a_flipped_byte_in_a_memory_mapped_chunk_is_caught(tmp_path: Path) -> None:
    chunks = ChunkStore(local_store(tmp_path).tier, chunk_bytes=64)
    record, _ = chunks.put(bytes(range(200)))
    assert len(record.checks) == len(record.chunks)
    path = tmp_path / chunk_key(record.chunks[2])
    raw = bytearray(path.read_bytes())
    raw[5] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpoint, match="fails its checksum"):
        chunks.get("f", record)
    with pytest.raises(CorruptCheckpoint, match="fails its checksum"):
        chunks.verify("f", record)


def test_manifests_without_xxh3_checks_are_still_verified_by_sha256(tmp_path: Path) -> None:
    store = local_store(tmp_path)
    record, new = store.chunks.put(b"older checkpoint format " * 10)
    record.checks = []  # as written before the checks existed
    store.commit(Manifest(step=1, files={"data": record}, world_size=1, bytes_new=new))
    doc = json.loads((tmp_path / step_dir(1) / MANIFEST_FILE).read_text())
    assert "checks" not in doc["files"]["data"]
    assert bytes(store.read_files(store.manifest(1))["data"]) == b"older checkpoint format " * 10
    victim = tmp_path / chunk_key(record.chunks[0])
    victim.write_bytes(b"X" + victim.read_bytes()[1:])
    with pytest.raises(CorruptCheckpoint, match="fails its checksum"):
        store.read_files(store.manifest(1))


def test_chunks_from_a_remote_tier_are_read_and_checked(tmp_path: Path) -> None:
    import fsspec

    tier = FsspecTier(fsspec.filesystem("memory"), "/restore-tests/remote")
    chunks = ChunkStore(tier, chunk_bytes=50)
    data = bytes(range(256)) * 2
    record, _ = chunks.put(data)
    got = chunks.get("f", record)
    assert bytes(got) == data
    assert got.read(45, 20) == data[45:65]  # across a chunk boundary
    assert b"".join(got.segments(0, len(data))) == data


def test_mapped_chunks_hold_no_file_descriptors(tmp_path: Path) -> None:
    """A checkpoint of many chunks restores without one open file per chunk."""
    import os

    chunks = ChunkStore(local_store(tmp_path).tier, chunk_bytes=64)
    data = os.urandom(64 * 300)
    record, _ = chunks.put(data)
    before = len(os.listdir("/proc/self/fd"))
    held = chunks.get("f", record)  # every chunk mapped and alive
    assert len(os.listdir("/proc/self/fd")) <= before
    assert bytes(held) == data


class RacedTier(FsspecTier):
    """A tier on which another rank stores each chunk first, at the same moment: the move of
    this writer's temporary file fails as it does when two ranks write equal chunks."""

    def write(self, key: str, data: bytes) -> None:
        super().write(key, data)  # the other rank's copy lands
        raise FileNotFoundError(f"{self.path(key)}.partial")


def test_a_chunk_another_rank_stored_at_the_same_moment_counts_as_stored(tmp_path: Path) -> None:
    import fsspec

    chunks = ChunkStore(RacedTier(fsspec.filesystem("file"), str(tmp_path)), chunk_bytes=16)
    data = bytes(range(100))
    record, _ = chunks.put(data)
    assert bytes(chunks.get("f", record)) == data


def test_a_failed_chunk_write_that_nobody_completed_still_fails(tmp_path: Path) -> None:
    import fsspec

    class LostTier(FsspecTier):
        def write(self, key: str, data: bytes) -> None:
            raise FileNotFoundError(f"{self.path(key)}.partial")

    chunks = ChunkStore(LostTier(fsspec.filesystem("file"), str(tmp_path)), chunk_bytes=16)
    with pytest.raises(FileNotFoundError):
        chunks.put(b"never stored anywhere")


@pytest.mark.parametrize(
    "tensor",
    [torch.randn(7, 5).to(torch.bfloat16), torch.arange(24).reshape(2, 3, 4), torch.tensor(3.5)],
)
def test_a_tensor_is_read_straight_from_its_archive(tensor: torch.Tensor) -> None:
    """The restore path copies a tensor's bytes out of the archive torch.save wrote, found
    through the zip's directory, without loading it; torch.load reads the same archive."""
    blob = b"".join(bytes(part) for part in _archive(tensor))
    found = _storage_range(_Whole(blob), _StorageInfo("item", 0, len(blob)))
    assert found is not None
    at, length = found
    stored = torch.frombuffer(bytearray(blob[at : at + length]), dtype=tensor.dtype)
    assert torch.equal(stored.view(tensor.shape), tensor)
    assert torch.equal(torch.load(io.BytesIO(blob), weights_only=True), tensor)
