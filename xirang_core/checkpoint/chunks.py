"""Content-addressed chunks: the unit a checkpoint is written, shared and verified in.

A file is cut into fixed-size chunks named by the SHA-256 of their bytes. A chunk already in the
store is referenced instead of written again, so tensors that did not change since the previous
checkpoint (frozen embeddings, sparse updates) cost nothing the second time; the chunk's name is
also its checksum, so a flipped or truncated byte is found on read.

The manifest also records an XXH3-128 digest of every chunk. Restoring checks that one: it finds
any flipped, truncated or swapped byte as surely as SHA-256 (a chance miss is 2**-128) at over
ten times the speed, so verifying a checkpoint costs far less than reading it. SHA-256 stays the
chunk's name (deduplication) and ``xirang ckpt verify`` checks both. Chunks on a local disk are
memory-mapped rather than read, so restoring copies each byte once: from the page cache into the
tensor it belongs to.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import itertools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import xxhash

from xirang_core.errors import XirangError
from xirang_core.storage.tier import FsspecTier

CHUNK_DIR = "chunks"


class CorruptCheckpoint(XirangError):
    """A checkpoint's bytes do not match what its manifest recorded."""


class RefusedCheckpoint(CorruptCheckpoint):
    """A checkpoint that must not be loaded: not signed by this pool's key, or needing a
    pickle. Resume stops on it instead of quietly falling back to an older one."""


#: a chunk digest: SHA-256 in lowercase hex
SHA256_HEX = 64
HEX = frozenset("0123456789abcdef")


def chunk_key(digest: str) -> str:
    """Two-level fan-out keeps directory listings short on filesystems and object stores."""
    return f"{CHUNK_DIR}/{digest[:2]}/{digest}"


@dataclass
class FileRecord:
    """One file of a checkpoint: its size, chunk digests in order, and a checksum over them.

    The file checksum is the SHA-256 of the ordered chunk digests, so it covers every byte
    without hashing the data twice. ``checks`` are the chunks' XXH3-128 digests, in the same
    order (empty in checkpoints written before they existed: those are checked by SHA-256)."""

    bytes: int
    sha256: str
    chunks: list[str]
    checks: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = {"bytes": self.bytes, "sha256": self.sha256, "chunks": self.chunks}
        return {**data, "checks": self.checks} if self.checks else data

    @classmethod
    def from_json(cls, data: dict) -> FileRecord:
        """A manifest's record; a chunk digest that is not a SHA-256 in hex (``../..``, a
        path) is refused, since a chunk's place in the store is made from its digest."""
        checks = list(data.get("checks") or [])
        chunks = list(data["chunks"])
        bad = next((d for d in chunks if not is_digest(d)), None)
        if bad is not None:
            raise CorruptCheckpoint(f"chunk digest {str(bad)[:80]!r} is not a SHA-256 in hex")
        return cls(int(data["bytes"]), str(data["sha256"]), chunks, checks)


def is_digest(value: object) -> bool:
    """Whether ``value`` is a SHA-256 hex digest (64 lowercase hex characters)."""
    return isinstance(value, str) and len(value) == SHA256_HEX and set(value) <= HEX


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
        self, data: Any, before_write: Callable[[int], None] | None = None
    ) -> tuple[FileRecord, int]:
        """Store ``data``; returns its record and how many bytes were new to the store.

        ``before_write`` (called with the index of each new chunk) lets fault drills fail a
        save midway; it is None in normal runs."""
        view = memoryview(data).cast("B")
        size = self.chunk_bytes
        pieces = [view[i : i + size] for i in range(0, len(view), size)]
        with ThreadPoolExecutor(self.threads) as pool:
            digests = list(pool.map(_sha256, pieces))
            checks = list(pool.map(_xxh3, pieces))
            first = {d: i for i, d in reversed(list(enumerate(digests)))}  # equal chunks: once
            todo = [(i, d) for d, i in first.items() if not (self.dedupe and self._exists(d))]

            def write(n: int) -> None:
                if before_write is not None:
                    before_write(n)
                self._write(todo[n][1], pieces[todo[n][0]])

            list(pool.map(write, range(len(todo))))
        new = sum(len(pieces[i]) for i, _ in todo)
        return FileRecord(len(view), digest_of(digests), digests, checks), new

    def put_object(
        self, parts: list[Any], before_write: Callable[[int], None] | None = None
    ) -> tuple[FileRecord, int]:
        """Store the bytes of ``parts``, back to back, as one chunk however large: the chunk
        is then the file itself, which a DCP reader finds by its name (``chunks/ab/<digest>``).
        The parts are hashed as they are and joined only to be written (once, when new)."""
        views = [memoryview(p).cast("B") for p in parts]
        sha, check = hashlib.sha256(), xxhash.xxh3_128()
        for view in views:
            sha.update(view)
            check.update(view)
        digest, size = sha.hexdigest(), sum(len(v) for v in views)
        new = 0
        if not (self.dedupe and self._exists(digest)):
            if before_write is not None:
                before_write(0)
            self._write(digest, memoryview(b"".join(views)))
            new = size
        return FileRecord(size, digest_of([digest]), [digest], [check.hexdigest()]), new

    def _exists(self, digest: str) -> bool:
        if digest in self.known:
            return True
        found = self.tier.exists(chunk_key(digest))
        if found:
            self.known.add(digest)
        return found

    def _write(self, digest: str, piece: memoryview) -> None:
        key = chunk_key(digest)
        try:
            self.tier.write(key, bytes(piece))
        except FileNotFoundError:
            # another rank stored the same bytes at the same moment: the tier's temporary
            # names collided and its move took ours. The name is the content, so its copy
            # is ours (every rank's put ends before the commit; restore checks it anyway).
            if not self.tier.exists(key):
                raise
        self.known.add(digest)

    def get(self, name: str, record: FileRecord) -> ChunkedBytes:
        """The file's bytes (as its chunks, not joined), every chunk checked against the
        manifest as it is read; raises CorruptCheckpoint."""
        return self.get_all({name: record})[name]

    def get_all(self, records: dict[str, FileRecord]) -> dict[str, ChunkedBytes]:
        """:meth:`get` of many files on one thread pool (a checkpoint holds a file per
        tensor: a pool per file would cost more than reading the small ones)."""
        with ThreadPoolExecutor(self.threads) as pool:
            reads = {n: self._read_all(n, r, False, pool) for n, r in records.items()}
            return {name: ChunkedBytes(read()) for name, read in reads.items()}

    def verify(self, name: str, record: FileRecord) -> None:
        """Read every chunk of one file and check it by both digests, keeping no bytes."""
        with ThreadPoolExecutor(self.threads) as pool:
            self._read_all(name, record, True, pool)()

    def _read_all(
        self, name: str, record: FileRecord, thorough: bool, pool: ThreadPoolExecutor
    ) -> Callable[[], list[Any]]:
        """Start reading every chunk of one file on ``pool``; the returned function waits for
        them and gives them in order."""
        _check_record(name, record)
        checks: list[str | None] = [*record.checks] or [None] * len(record.chunks)
        if len(checks) != len(record.chunks):
            raise CorruptCheckpoint(f"{name}: {len(checks)} checks for {len(record.chunks)} chunks")

        def read(pair: tuple[str, str | None]) -> Any:
            return self._read_checked(name, pair[0], pair[1], thorough)

        futures = [pool.submit(read, pair) for pair in zip(record.chunks, checks, strict=True)]

        def pieces() -> list[Any]:
            found = [f.result() for f in futures]
            size = sum(len(p) for p in found)
            if size != record.bytes:
                raise CorruptCheckpoint(f"{name}: {size} bytes, manifest says {record.bytes}")
            return found

        return pieces

    def _read_checked(self, name: str, digest: str, check: str | None, thorough: bool) -> Any:
        """One chunk, checked by its XXH3 digest when the manifest has one (and by SHA-256
        too when ``thorough`` or when it has none)."""
        try:
            piece = self._open(chunk_key(digest))
        except FileNotFoundError:
            raise CorruptCheckpoint(f"{name}: chunk {digest[:12]} is missing") from None
        bad = (check is not None and _xxh3(piece) != check) or (
            (thorough or check is None) and _sha256(piece) != digest
        )
        if bad:
            raise CorruptCheckpoint(f"{name}: chunk {digest[:12]} fails its checksum")
        self.known.add(digest)
        return piece

    def _open(self, key: str) -> Any:
        """A chunk's bytes: memory-mapped from a local disk (no copy), read from elsewhere.

        The mapping is torch's private one, which keeps no file descriptor open (Python's
        ``mmap`` keeps one per map: a large checkpoint would run out of them)."""
        if "file" not in _protocols(self.tier.fs):
            return self.tier.read(key)
        path = self.tier.path(key)
        size = os.path.getsize(path)
        if size == 0:
            return b""
        return torch.from_file(path, shared=False, size=size, dtype=torch.uint8).numpy()

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


def _sha256(piece: Any) -> str:
    return hashlib.sha256(piece).hexdigest()


def _xxh3(piece: Any) -> str:
    return xxhash.xxh3_128_hexdigest(piece)


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


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

    def stream(self, buffer: int = 1 << 20) -> io.BufferedReader:
        return io.BufferedReader(_ChunkStream(self), buffer)

    def segments(self, offset: int, length: int) -> Iterator[memoryview]:
        """The bytes ``[offset, offset + length)`` as views into the chunks, in order: a
        reader copies them where they belong without joining them first."""
        end = min(offset + length, len(self))
        index = bisect.bisect_right(self.starts, offset) - 1
        while offset < end:
            start = self.starts[index]
            stop = min(end, self.starts[index + 1])
            yield memoryview(self.pieces[index])[offset - start : stop - start]
            offset, index = stop, index + 1

    def read(self, offset: int, length: int) -> bytes:
        """The bytes ``[offset, offset + length)`` joined (one copy)."""
        return b"".join(self.segments(offset, length))


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
        for segment in self.data.segments(self.pos, len(view)):
            view[done : done + len(segment)] = segment
            done += len(segment)
        self.pos += done
        return done


def digest_of(digests: list[str]) -> str:
    """The checksum of a file: SHA-256 over its chunk digests in order."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _check_record(name: str, record: FileRecord) -> None:
    if digest_of(record.chunks) != record.sha256:
        raise CorruptCheckpoint(f"{name}: its chunk list does not match its checksum")
