"""The disk cache: byte limit, furthest-in-future eviction, shared downloads, crash safety."""

from __future__ import annotations

import errno
import multiprocessing
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang.storage.cache import PARTIAL, DiskCache, check_separate
from xirang_core.errors import DataError


def never(key: str) -> float:
    return float("inf")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(1, 400)), min_size=1, max_size=30))
def test_cache_never_exceeds_its_limit(tmp_path_factory, requests) -> None:
    cache = DiskCache(tmp_path_factory.mktemp("c"), limit_bytes=1000)
    for key, size in requests:
        cache.get(f"k{key}", lambda size=size: b"x" * size, lambda k: hash(k) % 7, set())
        assert sum(cache.usage().values()) <= 1000


def test_evicts_the_object_needed_furthest_in_future(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, limit_bytes=300)
    uses = {"a": 5.0, "b": 50.0, "c": 10.0, "d": 1.0}
    for key in "abc":
        cache.get(key, lambda: b"x" * 100, uses.__getitem__, set())
    cache.get("d", lambda: b"y" * 100, uses.__getitem__, set())
    assert set(cache.usage()) == {"a", "c", "d"}  # b was needed last


def test_does_not_evict_what_is_needed_before_the_new_object(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, limit_bytes=200)
    uses = {"a": 1.0, "b": 2.0, "late": 99.0}
    for key in "ab":
        cache.get(key, lambda: b"x" * 100, uses.__getitem__, set())
    data = cache.get("late", lambda: b"z" * 100, uses.__getitem__, set())
    assert data == b"z" * 100  # served from memory
    assert set(cache.usage()) == {"a", "b"}


def test_protected_objects_are_never_evicted(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, limit_bytes=200)
    for key in "ab":
        cache.get(key, lambda: b"x" * 100, never, set())
    cache.get("c", lambda: b"x" * 100, lambda k: 0.0 if k == "c" else 9.0, {"a", "b"})
    assert set(cache.usage()) == {"a", "b"}


def test_full_disk_evicts_or_serves_from_memory(tmp_path: Path, monkeypatch) -> None:
    cache = DiskCache(tmp_path, limit_bytes=10_000)

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    assert cache.get("k", lambda: b"data", never, set()) == b"data"
    assert cache.usage() == {}


def test_partial_download_of_a_crashed_process_is_removed(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    partial = tmp_path / "shards" / f"a.arrow{PARTIAL}12345"
    partial.write_bytes(b"half")
    cache = DiskCache(tmp_path, limit_bytes=1000)
    assert not partial.exists()
    assert cache.get("shards/a.arrow", lambda: b"whole", never, set()) == b"whole"


def _fetch_once(folder: str, log: str) -> bytes:
    def fetch() -> bytes:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return b"payload" * 1000

    return DiskCache(folder, 10**6).get("shards/s.arrow", fetch, never, set())


def test_processes_on_one_node_download_once(tmp_path: Path) -> None:
    log = tmp_path / "fetches.log"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        results = pool.starmap(_fetch_once, [(str(tmp_path / "cache"), str(log))] * 3)
    assert all(r == b"payload" * 1000 for r in results)
    assert len(log.read_text().split()) == 1


def test_cache_inside_the_dataset_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="only copy"):
        check_separate(tmp_path / "data" / "cache", str(tmp_path / "data"))
    check_separate(tmp_path / "cache", str(tmp_path / "data"))
