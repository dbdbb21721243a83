"""Content-addressed chunks: the unit a checkpoint is written, shared and verified in.

A file is cut into fixed-size chunks named by the SHA-256 of their bytes. A chunk already in the
store is referenced instead of written again, so tensors that did not change since the previous
checkpoint (frozen embeddings, sparse updates) cost nothing the second time; the chunk's name is
also its checksum, so a flipped or truncated byte is found on read.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

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

    def get(self, name: str, record: FileRecord) -> ChunkedBytes:
        """The file's bytes (as its chunks, not joined), every chunk checked against its
        digest; raises CorruptCheckpoint."""
        _check_record(name, record)
        with ThreadPoolExecutor(self.threads) as pool:
            pieces = list(pool.map(lambda d: self._read_checked(name, d), record.chunks))
        data = ChunkedBytes(pieces)
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


class ChunkedBytes:
    """A file held as its chunks: readable as a stream, or joined when bytes are needed.

    Restoring reads tensors straight out of the chunks, sparing a copy of the whole state."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.starts = list(itertools.accumulate((len(p) for p in pieces), initial=0))

    def __len__(self) -> int:
        return self.starts[-1]

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)

    def stream(self) -> io.BufferedReader:
        return io.BufferedReader(_ChunkStream(self), 1 << 20)


class _ChunkStream(io.RawIOBase):
    def __init__(self, data: ChunkedBytes) -> None:
        self.data, self.pos = data, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: len(self.data)}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self.pos < len(self.data):
            index = bisect.bisect_right(self.data.starts, self.pos) - 1
            piece = self.data.pieces[index]
            offset = self.pos - self.data.starts[index]
            n = min(len(view) - done, len(piece) - offset)
            view[done : done + n] = piece[offset : offset + n]
            done += n
            self.pos += n
        return done


def digest_of(digests: list[str]) -> str:
    """The checksum of a file: SHA-256 over its chunk digests in order."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _check_record(name: str, record: FileRecord) -> None:
    if digest_of(record.chunks) != record.sha256:
        raise CorruptCheckpoint(f"{name}: its chunk list does not match its checksum")
