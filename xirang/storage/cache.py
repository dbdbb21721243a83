"""A local disk cache of origin objects with a byte limit and furthest-in-future eviction.

The reader knows its whole access order in advance, so when room is needed the cache evicts the
object whose next use is furthest away (Belady's rule), never one in ``protect`` (being read now),
and only ever objects it copied from the origin, so no eviction destroys the last copy.

Processes on one node share the folder: a per-key ``flock`` makes one of them download while the
others wait and then read the finished file, so each object is fetched once per node. Downloads go
to ``<key>.partial-<pid>`` and are renamed into place; a lock held by a process that died is
released by the kernel, and partial files whose lock is free are deleted when a cache opens, so a
crash never leaves a stale lock or a half-written object behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from xirang_core.errors import DataError

NextUse = Callable[[str], float]
PARTIAL = ".partial-"
LOCKS = ".locks"
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
WHOLE_CACHE = "<budget>"


def furthest_first(keys: list[str], next_use: NextUse) -> list[str]:
    """``keys`` ordered for eviction: never needed again first, then furthest next use."""
    return sorted(keys, key=next_use, reverse=True)


class DiskCache:
    """Objects under ``folder`` keyed by relative path, bounded by ``limit_bytes`` in total."""

    def __init__(self, folder: str | Path, limit_bytes: int) -> None:
        self.folder = Path(folder)
        self.limit = int(limit_bytes)
        (self.folder / LOCKS).mkdir(parents=True, exist_ok=True)
        self.evictions = 0
        self.remove_stale_partials()

    def path(self, key: str) -> Path:
        return self.folder / key

    def usage(self) -> dict[str, int]:
        """Bytes of every complete object in the cache, by key."""
        found = {}
        for root, dirs, files in os.walk(self.folder):
            dirs[:] = [d for d in dirs if d != LOCKS]
            for name in files:
                if PARTIAL not in name:
                    path = Path(root) / name
                    with contextlib.suppress(FileNotFoundError):
                        found[path.relative_to(self.folder).as_posix()] = path.stat().st_size
        return found

    def get(
        self, key: str, fetch: Callable[[], bytes], next_use: NextUse, protect: set[str]
    ) -> bytes:
        """The object's bytes, fetched by ``fetch`` once per node and kept while room allows."""
        path = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            return path.read_bytes()
        with self.locked(key):
            with contextlib.suppress(FileNotFoundError):
                return path.read_bytes()  # another process finished it while we waited
            data = fetch()
            self.store(key, data, next_use, protect | {key})
            return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of a cached object; None when it is not in the cache."""
        try:
            with open(self.path(key), "rb") as handle:
                handle.seek(start)
                return handle.read(end - start)
        except FileNotFoundError:
            return None

    def store(self, key: str, data: bytes, next_use: NextUse, protect: set[str]) -> bool:
        """Keep ``data`` if room can be made without evicting something needed sooner."""
        if len(data) > self.limit:
            return False
        with self.locked(WHOLE_CACHE):  # processes sharing the folder share one byte budget
            if not self.make_room(len(data), next_use(key), next_use, protect):
                return False
            try:
                self._write(key, data)
            except OSError as exc:
                if exc.errno not in NO_SPACE:
                    raise
                return False  # disk full: train from memory rather than crash
        return True

    def make_room(self, need: int, needed_at: float, next_use: NextUse, protect: set[str]) -> bool:
        """Evict furthest-in-future objects until ``need`` bytes fit under the limit."""
        sizes = self.usage()
        used = sum(sizes.values())
        for victim in furthest_first([k for k in sizes if k not in protect], next_use):
            if used + need <= self.limit:
                break
            if next_use(victim) <= needed_at:
                return False  # everything left is needed before the new object
            self.evict(victim)
            used -= sizes[victim]
        return used + need <= self.limit

    def evict(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(key).unlink()
            self.evictions += 1

    def _write(self, key: str, data: bytes) -> None:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}{PARTIAL}{os.getpid()}")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """An exclusive per-key lock shared by processes; released by the kernel on a crash."""
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        with open(self.folder / LOCKS / name, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def remove_stale_partials(self) -> None:
        """Delete partial downloads nobody is writing (their key's lock is free)."""
        for partial in self.folder.rglob(f"*{PARTIAL}*"):
            key = partial.relative_to(self.folder).as_posix().split(PARTIAL)[0]
            name = hashlib.sha256(key.encode()).hexdigest()[:32]
            with open(self.folder / LOCKS / name, "a+b") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live download owns it
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
                fcntl.flock(handle, fcntl.LOCK_UN)


def check_separate(cache_dir: str | Path, origin_root: str) -> None:
    """Refuse a cache inside the origin: evicting there would delete the only copy."""
    cache = Path(cache_dir).resolve()
    with contextlib.suppress(ValueError, OSError):
        origin = Path(origin_root.removeprefix("file://")).resolve()
        if cache == origin or origin in cache.parents or cache in origin.parents:
            raise DataError(
                f"data.cache_dir={cache_dir} overlaps the dataset at {origin_root}; evicting "
                "there would delete the only copy. Choose a cache folder outside the dataset"
            )
