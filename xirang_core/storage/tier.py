"""A storage tier is an fsspec filesystem plus a root; keys are ``/``-separated relative paths."""

from __future__ import annotations

import copy
import os
import pickle
import posixpath
import uuid
from collections.abc import Iterable
from typing import Any


class FsspecTier:
    """Read, write, list, size and evict objects under ``root`` of an fsspec filesystem.

    Writes go to a temporary key first and are moved into place, so a reader never sees a
    partial object on filesystems that move atomically (local, memory, most shared ones).
    """

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def reopened(self) -> FsspecTier:
        """A copy with a filesystem instance of its own, for use after a fork: async
        filesystems (s3fs) must not share their event loop with the parent process."""
        clone = copy.copy(self)
        clone.fs = pickle.loads(pickle.dumps(self.fs))
        return clone

    def path(self, key: str) -> str:
        return posixpath.join(self.root, key) if key else self.root

    def read(self, key: str) -> bytes:
        return self.fs.cat_file(self.path(key))

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (one ranged GET on an object store)."""
        return self.fs.cat_file(self.path(key), start=start, end=end)

    def write(self, key: str, data: bytes) -> None:
        target = self.path(key)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        # a temporary key per writer: two processes writing one content-addressed key at once
        # never move each other's half-written object into place
        tmp = f"{target}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, target)

    def sync(self, keys: Iterable[str]) -> None:
        """Make the objects at ``keys`` survive power loss. On a local disk: fsync each file
        and then each folder holding one (its entry, from the move into place). Elsewhere a
        completed write already is durable (an object store acknowledges stored objects only),
        and this does nothing."""
        if "file" not in _protocols(self.fs):
            return
        folders = set()
        for key in keys:
            path = self.fs._strip_protocol(self.path(key))
            _fsync(path, os.O_RDONLY)
            folders.add(os.path.dirname(path))
        for folder in sorted(folders):
            _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)

    def put_file(self, local_path: str, key: str) -> None:
        target = self.path(key)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        self.fs.put_file(local_path, target)

    def get_file(self, key: str, local_path: str) -> None:
        self.fs.get_file(self.path(key), local_path)

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix)
        if not self.fs.exists(base):
            return []
        found = self.fs.find(base)
        root = self.fs._strip_protocol(self.root)
        return sorted(posixpath.relpath(self.fs._strip_protocol(p), root) for p in found)

    def size(self, key: str) -> int:
        return int(self.fs.size(self.path(key)))

    def evict(self, key: str) -> None:
        if self.fs.exists(self.path(key)):
            self.fs.rm(self.path(key), recursive=True)


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
