"""Content-addressed chunks: the unit a checkpoint is written, shared and verified in.

A file is cut into fixed-size chunks named by the SHA-256 of their bytes. A chunk already in the
store is referenced instead of written again, so tensors that did not change since the previous
checkpoint (frozen embeddings, sparse updates) cost nothing the second time; the chunk's name is
also its checksum, so a flipped or truncated byte is found on read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from xirang_core.errors import XirangError
from xirang_core.storage.tier import FsspecTier

CHUNK_DIR = "chunks"


class CorruptCheckpoint(XirangError):
    """A checkpoint's bytes do not match what its manifest recorded."""


def chunk_key(digest: str) -> str:
    """Two-level fan-out keeps directory listings short on filesystems and object stores."""
    return f"{CHUNK_DIR}/{digest[:2]}/{digest}"


@dataclass
class FileRecord:
    """One file of a checkpoint: its size, chunk digests in order, and a checksum over them.

    The file checksum is the SHA-256 of the ordered chunk digests, so it covers every byte
    without hashing the data twice."""

    bytes: int
    sha256: str
    chunks: list[str]

    def to_json(self) -> dict:
        return {"bytes": self.bytes, "sha256": self.sha256, "chunks": self.chunks}

    @classmethod
    def from_json(cls, data: dict) -> FileRecord:
        return cls(int(data["bytes"]), str(data["sha256"]), list(data["chunks"]))


@dataclass
class ChunkStore:
    """Puts and gets chunked files in ``tier``; remembers chunks it knows to exist.

    With ``dedupe`` off every chunk is written again (a full, non-incremental save)."""

    tier: FsspecTier
    chunk_bytes: int = 4 << 20
    threads: int = 4
    dedupe: bool = True
    known: set[str] = field(default_factory=set)

    def put(
        self, data: bytes, before_write: Callable[[int], None] | None = None
    ) -> tuple[FileRecord, int]:
        """Store ``data``; returns its record and how many bytes were new to the store.

        ``before_write`` (called with the index of each new chunk) lets fault drills fail a save
        midway; it is None in normal runs."""
        view = memoryview(data)
        pieces = [view[i : i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)]
        with ThreadPoolExecutor(self.threads) as pool:
            digests = list(pool.map(_sha256, pieces))
            first = {d: i for i, d in reversed(list(enumerate(digests)))}  # equal chunks: once
            todo = [(i, d) for d, i in first.items() if not (self.dedupe and self._exists(d))]

            def write(n: int) -> None:
                if before_write is not None:
                    before_write(n)
                self._write(todo[n][1], pieces[todo[n][0]])

            list(pool.map(write, range(len(todo))))
        new = sum(len(pieces[i]) for i, _ in todo)
        return FileRecord(len(data), digest_of(digests), digests), new

    def _exists(self, digest: str) -> bool:
        if digest in self.known:
            return True
        found = self.tier.exists(chunk_key(digest))
        if found:
            self.known.add(digest)
        return found

    def _write(self, digest: str, piece: memoryview) -> None:
        self.tier.write(chunk_key(digest), bytes(piece))
        self.known.add(digest)

    def get(self, name: str, record: FileRecord) -> bytes:
        """The file's bytes, every chunk checked against its digest; raises CorruptCheckpoint."""
        _check_record(name, record)
        with ThreadPoolExecutor(self.threads) as pool:
            pieces = list(pool.map(lambda d: self._read_checked(name, d), record.chunks))
        data = b"".join(pieces)
        if len(data) != record.bytes:
            raise CorruptCheckpoint(f"{name}: {len(data)} bytes, manifest says {record.bytes}")
        return data

    def verify(self, name: str, record: FileRecord) -> None:
        """Read and check every chunk of one file without keeping the bytes."""
        _check_record(name, record)
        with ThreadPoolExecutor(self.threads) as pool:
            sizes = list(pool.map(lambda d: len(self._read_checked(name, d)), record.chunks))
        if sum(sizes) != record.bytes:
            raise CorruptCheckpoint(f"{name}: {sum(sizes)} bytes, manifest says {record.bytes}")

    def _read_checked(self, name: str, digest: str) -> bytes:
        try:
            piece = self.tier.read(chunk_key(digest))
        except FileNotFoundError:
            raise CorruptCheckpoint(f"{name}: chunk {digest[:12]} is missing") from None
        if _sha256(piece) != digest:
            raise CorruptCheckpoint(f"{name}: chunk {digest[:12]} fails its checksum")
        self.known.add(digest)
        return piece

    def collect_garbage(self, referenced: set[str]) -> int:
        """Delete chunks no remaining checkpoint references; returns how many went."""
        removed = 0
        for key in self.tier.list(CHUNK_DIR):
            digest = key.rsplit("/", 1)[-1]
            if digest not in referenced:
                self.tier.evict(key)
                self.known.discard(digest)
                removed += 1
        return removed


def _sha256(piece: bytes | memoryview) -> str:
    return hashlib.sha256(piece).hexdigest()


def digest_of(digests: list[str]) -> str:
    """The checksum of a file: SHA-256 over its chunk digests in order."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _check_record(name: str, record: FileRecord) -> None:
    if digest_of(record.chunks) != record.sha256:
        raise CorruptCheckpoint(f"{name}: its chunk list does not match its checksum")
