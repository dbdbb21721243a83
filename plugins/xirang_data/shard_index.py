"""A token shard's document offsets without decoding its tokens; tokens by record batch.

A resumed run's first batch reads a few rows scattered over a block of shards. Where those rows
fall follows from every document's length (the list offsets), but decoding a shard decodes its
token values too: tens of milliseconds for a block, for the few thousand tokens a batch reads.
Arrow IPC compresses each buffer of each record batch on its own, so this reads the file's
footer and each record batch's metadata (flatbuffers, parsed here: pyarrow decodes a record
batch only whole), decompresses the small offsets buffers, and a record batch's values only
when a row reads from it. The bytes are the shard's checksummed bytes; nothing is guessed.

Reading and hashing whole shards still costs a resume most of its first batch, so a token
shard is written with a sidecar index (:func:`sidecar`): the document offsets and, per record
batch, where its values buffer is in the shard, its codec and the sha256 of those bytes. The
manifest holds the sidecar's sha256, so :class:`RangedIndex` reads the sidecar, then only the
value ranges its rows need, each checked against the sidecar's hash before it is decoded: every
byte used is still vouched for by the content-addressed manifest. The format is plain
little-endian arrays (never pickle): ``SIDECAR_MAGIC``, a ``HEAD`` record, ``docs + 1`` int64
document offsets, ``batches + 1`` int64 first values of each record batch, then a ``BATCH``
record per record batch.
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from xirang import DataError

#: the end of an Arrow IPC file: int32 footer length, then this
MAGIC = b"ARROW1"
#: BodyCompression codecs of the IPC format
CODECS = {0: "lz4", 1: "zstd"}
#: the first bytes of a sidecar index (its format's version is the last byte but the newline)
SIDECAR_MAGIC = b"XRIDX\x00\x01\n"
HEAD = np.dtype([("docs", "<i8"), ("batches", "<i8"), ("dtype", "S8")])
#: a record batch's values buffer: byte range in the shard, IPC codec (-1: none), sha256
BATCH = np.dtype([("at", "<i8"), ("length", "<i8"), ("codec", "<i8"), ("sha256", "u1", 32)])
CODEC_IDS: dict[str | None, int] = {None: -1, "lz4": 0, "zstd": 1}


class _Flat:
    """Just enough of the flatbuffers wire format to read Arrow's footer and message tables."""

    def __init__(self, buf: memoryview, base: int = 0) -> None:
        self.buf, self.base = buf, base

    def u32(self, at: int) -> int:
        return struct.unpack_from("<I", self.buf, at)[0]

    def root(self) -> int:
        return self.base + self.u32(self.base)

    def field(self, table: int, index: int) -> int | None:
        """Where field ``index`` of the table at ``table`` is stored (None: absent, default)."""
        vtable = table - struct.unpack_from("<i", self.buf, table)[0]
        size = struct.unpack_from("<H", self.buf, vtable)[0]
        if 4 + 2 * index >= size:
            return None
        offset = struct.unpack_from("<H", self.buf, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    def table(self, table: int, index: int) -> int | None:
        at = self.field(table, index)
        return None if at is None else at + self.u32(at)

    def structs(self, table: int, index: int, fmt: str) -> list[tuple]:
        """A vector of structs of layout ``fmt`` (little-endian)."""
        at = self.table(table, index)
        if at is None:
            return []
        size = struct.calcsize(fmt)
        return [struct.unpack_from(fmt, self.buf, at + 4 + i * size) for i in range(self.u32(at))]


class _Values(ABC):
    """Token values of a shard by range, decoding only the record batches a range touches.
    Subclasses set ``offsets``, ``batch_values``, ``dtype`` and ``_values`` and decode one
    record batch's values in :meth:`_decode_batch`."""

    offsets: np.ndarray  # every document's first token, and the end of the last
    batch_values: np.ndarray  # first value of each record batch, and the end of the last
    dtype: np.dtype
    _values: dict[int, np.ndarray]

    def values(self, lo: int, hi: int) -> np.ndarray:
        """Token values ``[lo, hi)`` of the shard (a document's tokens are within one batch)."""
        first = int(np.searchsorted(self.batch_values, lo, side="right")) - 1
        pieces, at = [], lo
        while at < hi:
            base, end = int(self.batch_values[first]), int(self.batch_values[first + 1])
            values = self._batch_values(first)
            pieces.append(values[at - base : min(hi, end) - base])
            at, first = min(hi, end), first + 1
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.zeros(0, self.dtype)

    def _batch_values(self, index: int) -> np.ndarray:
        if index not in self._values:
            self._values[index] = self._decode_batch(index).view(self.dtype)
        return self._values[index]

    @abstractmethod
    def _decode_batch(self, index: int) -> np.ndarray:
        """Record batch ``index``'s values buffer, decoded to bytes."""


class ShardIndex(_Values):
    """Document offsets of a one-column ``list<uint*>`` token shard, from its whole (checked)
    bytes, and its token values by range."""

    def __init__(self, data: bytes, key: str) -> None:
        self.view, self.key = memoryview(data), key
        self.buffer = pa.py_buffer(data)
        try:
            column = pa.ipc.open_file(self.buffer).schema.field(0).type
            if not pa.types.is_list(column):  # int32 offsets; a large_list's are int64
                raise DataError(f"shard {key} holds {column}, not a list of token ids")
            self.value_type = column.value_type
            self._batches = [self._batch(block) for block in self._blocks()]
        except (pa.ArrowInvalid, struct.error, IndexError, KeyError) as exc:
            raise DataError(f"shard {key} is not a readable token shard: {exc}") from None
        self.dtype = np.dtype(str(self.value_type))
        bases = np.concatenate([[0], np.cumsum([int(o[-1]) for o, _ in self._batches])])
        #: every document's first token, and the end of the last, across record batches
        self.offsets = np.concatenate(
            [o[:-1] + b for (o, _), b in zip(self._batches, bases, strict=False)] + [bases[-1:]]
        ).astype(np.int64)
        self.batch_values = bases  # first value of each record batch
        self._values: dict[int, np.ndarray] = {}

    def _blocks(self) -> list[tuple[int, int, int]]:
        """(offset, metadata length, body length) of each record batch, from the footer."""
        end = len(self.view) - len(MAGIC)
        if bytes(self.view[end:]) != MAGIC:
            raise DataError(f"shard {self.key} is not an Arrow IPC file")
        size = struct.unpack_from("<i", self.view, end - 4)[0]
        flat = _Flat(self.view, end - 4 - size)
        return flat.structs(flat.root(), 3, "<qi4xq")

    def _batch(self, block: tuple[int, int, int]) -> tuple[np.ndarray, tuple]:
        """A record batch's decoded offsets and where its (compressed) values are."""
        offset, meta_length, _ = block
        prefix = 8 if struct.unpack_from("<i", self.view, offset)[0] == -1 else 4
        flat = _Flat(self.view, offset + prefix)
        batch = flat.table(flat.root(), 2)  # Message.header: the RecordBatch
        assert batch is not None
        buffers = flat.structs(batch, 2, "<qq")  # list validity, offsets, item validity, values
        compression = flat.table(batch, 3)
        codec = None
        if compression is not None:
            at = flat.field(compression, 0)
            codec = CODECS[self.view[at] if at is not None else 0]
        body = offset + meta_length
        offsets = self._decode(body + buffers[1][0], buffers[1][1], codec).view(np.int32)
        if not len(offsets):  # a batch of no documents may store no offsets at all
            offsets = np.zeros(1, dtype=np.int32)
        if offsets[0]:  # pyarrow writes each batch's values from its first document's
            raise DataError(f"shard {self.key} has a record batch whose offsets start past 0")
        return offsets, (body + buffers[3][0], buffers[3][1], codec)

    def _decode(self, at: int, length: int, codec: str | None) -> np.ndarray:
        return decode_buffer(self.buffer.slice(at, length), codec)

    def _decode_batch(self, index: int) -> np.ndarray:
        return self._decode(*self._batches[index][1])

    @property
    def value_ranges(self) -> list[tuple[int, int, str | None]]:
        """(offset, length, codec) of each record batch's values buffer in the shard."""
        return [where for _, where in self._batches]


def decode_buffer(buffer: pa.Buffer, codec: str | None) -> np.ndarray:
    """One IPC buffer's bytes: compressed buffers start with their int64 decoded length (-1:
    stored as is)."""
    if codec is None:
        return np.frombuffer(buffer, np.uint8)
    decoded = struct.unpack_from("<q", buffer)[0]
    if decoded == -1:
        return np.frombuffer(buffer, np.uint8, len(buffer) - 8, 8)
    return np.frombuffer(pa.Codec(codec).decompress(buffer.slice(8), decoded), np.uint8)


def sidecar(data: bytes, key: str) -> bytes:
    """The sidecar index of the token shard ``data`` (see the module docstring)."""
    index = ShardIndex(data, key)
    ranges = index.value_ranges
    head = np.array([(len(index.offsets) - 1, len(ranges), index.dtype.name)], HEAD)
    batches = np.array(
        [
            (
                at,
                n,
                CODEC_IDS[codec],
                np.frombuffer(hashlib.sha256(data[at : at + n]).digest(), np.uint8),
            )
            for at, n, codec in ranges
        ],
        BATCH,
    )
    arrays = (head, index.offsets.astype("<i8"), index.batch_values.astype("<i8"), batches)
    return SIDECAR_MAGIC + b"".join(a.tobytes() for a in arrays)


class RangedIndex(_Values):
    """A token shard's :class:`ShardIndex` from its sidecar: offsets from the sidecar, each
    record batch's values read by range and checked against the sidecar's sha256 of them. A
    range that fails its check is never decoded: the shard is read whole instead (``whole``,
    which checks the whole shard and refetches a bad copy from the origin)."""

    def __init__(
        self,
        data: bytes,
        key: str,
        read_range: Callable[[int, int], bytes],
        whole: Callable[[], ShardIndex],
    ) -> None:
        self.key, self._read_range, self._whole = key, read_range, whole
        self._fallback: ShardIndex | None = None
        self._values = {}
        try:
            self._parse(memoryview(data))
        except (ValueError, TypeError) as exc:
            raise DataError(f"the sidecar index of shard {key} is not readable: {exc}") from None

    def _parse(self, view: memoryview) -> None:
        if bytes(view[: len(SIDECAR_MAGIC)]) != SIDECAR_MAGIC:
            raise ValueError("not a sidecar index of this version")
        at = len(SIDECAR_MAGIC)
        head = np.frombuffer(view, HEAD, 1, at)[0]
        docs, batches = int(head["docs"]), int(head["batches"])
        at += HEAD.itemsize
        self.offsets = np.frombuffer(view, "<i8", docs + 1, at).astype(np.int64)
        at += 8 * (docs + 1)
        self.batch_values = np.frombuffer(view, "<i8", batches + 1, at).astype(np.int64)
        at += 8 * (batches + 1)
        self._batches = np.frombuffer(view, BATCH, batches, at)
        if at + BATCH.itemsize * batches != len(view):
            raise ValueError(f"{len(view)} bytes, not the {at + BATCH.itemsize * batches} it lists")
        self.dtype = np.dtype(head["dtype"].decode())
        if self.dtype.kind not in "ui":
            raise ValueError(f"token values of type {self.dtype}")

    def _decode_batch(self, index: int) -> np.ndarray:
        if self._fallback is None:
            batch = self._batches[index]
            at, length = int(batch["at"]), int(batch["length"])
            try:
                data = self._read_range(at, at + length)
            except OSError:  # gone or unreachable: the whole read says which, clearly
                data = b""
            if len(data) == length and hashlib.sha256(data).digest() == batch["sha256"].tobytes():
                return decode_buffer(pa.py_buffer(data), CODECS.get(int(batch["codec"])))
            self._fallback = self._whole()  # a bad range: the whole shard, checked
        return self._fallback._decode_batch(index)
