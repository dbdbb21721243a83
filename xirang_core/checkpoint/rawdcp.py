"""DCP storage in torch's own layout, read back with one copy per tensor and no pickle.

A checkpoint's DCP metadata and items are what torch's ``FileSystemWriter`` writes: a pickled
``.metadata`` in the step folder and one ``torch.save`` archive per tensor, so torch's
``FileSystemReader`` and ``dcp_to_torch_save`` read a xirang step folder as-is. Each item is
also a content-addressed object of the chunk store (``../chunks/ab/<digest>`` from the step
folder), so an unchanged tensor is stored once across checkpoints.

xirang itself never unpickles: it reads the same metadata from a JSON copy (:mod:`dcpmeta`),
copies each tensor's bytes straight out of its archive's storage record into the tensor DCP
resolves for it, and loads non-tensor values by torch's weights-only rules. Older xirang
checkpoints (one raw ``.raw`` file per rank) are still read.
"""

from __future__ import annotations

import io
import pickle
import struct
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any, cast

import torch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from xirang_core.checkpoint import dcpmeta
from xirang_core.checkpoint.chunks import (
    ChunkStore,
    CorruptCheckpoint,
    FileRecord,
    RefusedCheckpoint,
    chunk_key,
)

if TYPE_CHECKING:  # memfs builds on this module
    from xirang_core.checkpoint.memfs import MemoryFileSystem

#: the files of checkpoints written before xirang used torch's item format
RAW_SUFFIX = ".raw"
#: where a step folder's DCP items are, relative to it: the chunk store's objects
OBJECT_PREFIX = "../"
#: a zip central directory entry's method (at 10), compressed size (20), name, extra and
#: comment lengths (28, 30, 32) and its local header's offset (42)
_CENTRAL = struct.Struct("<10xH8xI4xHHH8xI")
ZIP64_SIZE = 0xFFFFFFFF


class ObjectWriter(FileSystemWriter):
    """Stores every item as a content-addressed object of the chunk store, in torch's own DCP
    item format (a ``torch.save`` archive per tensor), and names it in DCP's metadata by its
    path from the step folder (``../chunks/ab/<digest>``). So ``FileSystemReader`` and
    ``dcp_to_torch_save`` read the step folder as-is, while an item that did not change since
    the previous checkpoint (a frozen tensor, its optimizer state) is stored once."""

    def __init__(self, chunks: ChunkStore, before_write: Callable[[int], None] | None) -> None:
        super().__init__("", single_file_per_rank=True, sync_files=False, overwrite=True)
        self.chunks, self.before_write = chunks, before_write
        self.records: dict[str, FileRecord] = {}
        self.new = 0
        self.lock = threading.Lock()

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        def store(item: Any) -> WriteResult:
            data = planner.resolve_data(item)
            parts = [data.getbuffer()] if isinstance(data, io.BytesIO) else _archive(data)
            record, new = self.chunks.put_object(parts, self.before_write)
            name = OBJECT_PREFIX + chunk_key(record.chunks[0])
            with self.lock:  # equal items (two zero tensors) are one object, counted once
                self.new += new if name not in self.records else 0
                self.records[name] = record
            return WriteResult(item.index, record.bytes, _StorageInfo(name, 0, record.bytes))

        with ThreadPoolExecutor(self.chunks.threads) as pool:
            results = list(pool.map(store, plan.items))
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """DCP's pickled ``.metadata`` for torch's tools, and the same as JSON for xirang's."""
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for rs in results for wr in rs}
        for name, data in (
            (dcpmeta.PICKLE_METADATA, pickle.dumps(metadata)),
            (dcpmeta.METADATA_FILE, dcpmeta.to_json(metadata)),
        ):
            with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as stream:
                stream.write(data)


def _archive(tensor: torch.Tensor) -> list[Any]:
    """The ``torch.save`` archive of a CPU tensor, as its parts: the records torch writes,
    and in its storage record the tensor's own bytes, uncopied (torch writes the archive
    with ``skip_data``, leaving that record's place empty). The storage is exactly the
    tensor's elements in order (a view into a larger buffer would save the whole buffer)."""
    flat = tensor.detach().cpu()
    if not (flat.is_contiguous() and flat.untyped_storage().nbytes() == _nbytes(flat)):
        flat = flat.contiguous().clone()
    layout = _Layout()
    with torch.serialization.skip_data():
        torch.save(flat, cast(IO[bytes], layout))  # a binary stream, as torch.save writes one
    data = flat.reshape(-1).view(torch.uint8).numpy().data if _nbytes(flat) else b""
    return layout.parts(data)


class _Layout(io.RawIOBase):
    """A file that keeps what ``torch.save`` writes, and where it skips the storage bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = 0
        self.pieces: list[tuple[int, bytes | int]] = []  # (offset, bytes written or hole size)

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def write(self, data: Any) -> int:
        written = bytes(data)
        self.pieces.append((self.pos, written))
        self.pos += len(written)
        return len(written)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.pos + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self.pos:
            raise io.UnsupportedOperation("torch.save only skips forward here")
        if target > self.pos:
            self.pieces.append((self.pos, target - self.pos))
        self.pos = target
        return self.pos

    def parts(self, data: Any) -> list[Any]:
        """The archive's bytes in order, ``data`` in the one place torch skipped."""
        holes = [size for _, size in self.pieces if isinstance(size, int)]
        if holes != ([len(data)] if len(data) else []):
            raise ValueError(f"torch.save skipped {holes} bytes, the tensor has {len(data)}")
        return [data if isinstance(piece, int) else piece for _, piece in self.pieces]


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class RawReader(FileSystemReader):
    """Reads xirang's checkpoints straight into the tensors DCP's planner resolves: items in
    torch's format (``torch.save`` archives, read by torch's weights-only rules, or copied
    out of the archive directly when xirang wrote them) and the raw files of older xirang
    checkpoints. DCP's pickled ``.metadata`` is never loaded: the JSON copy is."""

    def __init__(self, files: MemoryFileSystem) -> None:
        super().__init__("")
        self.fs = files  # type: ignore[assignment]  # torch types it FileSystem; uses the base
        self.files = files  # the same, typed: its ``data`` keeps chunked files unjoined

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The JSON metadata; a checkpoint with only DCP's pickled ``.metadata`` is refused."""
        path = self.fs.concat_path(self.path, dcpmeta.METADATA_FILE)
        if not self.fs.exists(path):
            if self.fs.exists(self.fs.concat_path(self.path, dcpmeta.PICKLE_METADATA)):
                raise dcpmeta.pickle_refusal("checkpoint")
            raise CorruptCheckpoint(f"checkpoint: no {dcpmeta.METADATA_FILE}")
        return dcpmeta.from_json(bytes(self.files.data(path)), "checkpoint")

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, **kw: Any) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, **kw)
        self.metadata = metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        opened: dict[str, Any] = {}
        for req in plan.items:
            info = self._info(req)
            if info.relative_path not in opened:
                opened[info.relative_path] = self._file(info.relative_path)
            data = opened[info.relative_path]
            if req.type == LoadItemType.BYTE_IO:
                value = data.read(info.offset, info.length)
                planner.load_bytes(req, dcpmeta.safe_value(value, req.storage_index.fqn))
                continue
            target = planner.resolve_tensor(req).detach()
            if info.relative_path.endswith(RAW_SUFFIX):
                self._fill(target, req, data, info.offset, info.length)
            else:
                self._fill_saved(target, req, data, info)
            planner.commit_tensor(req, target)
        future: Future[None] = Future()
        future.set_result(None)
        return future

    def _fill_saved(
        self, target: torch.Tensor, req: ReadItem, data: Any, info: _StorageInfo
    ) -> None:
        """An item ``torch.save`` wrote: xirang's own objects (dense, exactly their elements)
        are copied from the archive's storage record; anything else is loaded by torch's
        weights-only rules first (no code runs), then copied."""
        ours = info.relative_path.startswith(OBJECT_PREFIX)
        stored = _storage_range(data, info) if ours else None
        if stored is not None:
            self._fill(target, req, data, *stored)
            return
        try:
            tensor = torch.load(io.BytesIO(data.read(info.offset, info.length)), weights_only=True)
        except Exception as exc:
            raise RefusedCheckpoint(
                f"checkpoint: {req.storage_index.fqn} in {info.relative_path} is not a plain "
                f"tensor ({type(exc).__name__}); xirang loads no pickle"
            ) from None
        if not isinstance(tensor, torch.Tensor):
            raise CorruptCheckpoint(f"checkpoint: {req.storage_index.fqn} is not a tensor")
        target.copy_(_narrow(tensor, req))

    def _info(self, req: ReadItem) -> _StorageInfo:
        return self.storage_data[req.storage_index]

    def _file(self, relative_path: str) -> Any:
        """The file's bytes as the filesystem holds them (chunked files stay unjoined)."""
        data = self.files.data(self.fs.concat_path(self.path, relative_path))
        return data if hasattr(data, "segments") else _Whole(data)

    def _fill(self, target: torch.Tensor, req: ReadItem, data: Any, at: int, length: int) -> None:
        """Copy the stored piece into ``target``: segment by segment when it is the whole
        stored chunk and ``target`` is dense; through a temporary otherwise (resharding)."""
        sizes, dtype = self._stored_shape(req.storage_index)
        whole = list(req.lengths) == list(sizes) and not any(req.storage_offsets)
        if whole and target.is_contiguous() and target.dtype == dtype:
            dest = target.reshape(-1).view(torch.uint8)
            done = 0
            for segment in data.segments(at, length):
                dest[done : done + len(segment)].copy_(_uint8(segment))
                done += len(segment)
            if done != dest.numel():
                raise ValueError(f"{req.storage_index.fqn}: {done} bytes for {dest.numel()}")
            return
        stored = _uint8(bytearray(data.read(at, length))).view(dtype).view(sizes)
        target.copy_(_narrow(stored, req))

    def _stored_shape(self, index: MetadataIndex) -> tuple[torch.Size, torch.dtype]:
        """Shape and dtype of the stored chunk ``index`` names, from DCP's metadata."""
        md = self.metadata.state_dict_metadata[index.fqn]
        assert isinstance(md, TensorStorageMetadata)
        offsets = list(index.offset or [])
        hinted = md.chunks[index.index] if index.index is not None else None
        if hinted is not None and list(hinted.offsets) == offsets:
            return hinted.sizes, md.properties.dtype
        chunk = next(c for c in md.chunks if list(c.offsets) == offsets)
        return chunk.sizes, md.properties.dtype


def _narrow(stored: torch.Tensor, req: ReadItem) -> torch.Tensor:
    """The part of a stored chunk that ``req`` asks for (all of it unless resharding)."""
    for dim, (start, length) in enumerate(zip(req.storage_offsets, req.lengths, strict=True)):
        stored = stored.narrow(dim, start, length)
    return stored


def _storage_range(data: Any, info: _StorageInfo) -> tuple[int, int] | None:
    """Where the tensor's bytes lie in a ``torch.save`` archive, as (offset in ``data``,
    length): its uncompressed ``data/0`` record, found through the zip's central directory
    (read from the archive's end, a few hundred bytes). None when the archive is laid out
    otherwise; its reader then loads it whole."""
    base, size = info.offset, info.length
    directory = _central_directory(data, base, size)
    if directory is None:
        return None
    start, length = directory
    table = data.read(base + start, length)
    at = 0
    while table[at : at + 4] == b"PK\x01\x02":
        method, stored, name_len, extra_len, note_len, header = _CENTRAL.unpack_from(table, at)
        name = table[at + 46 : at + 46 + name_len]
        at += 46 + name_len + extra_len + note_len
        if not name.endswith(b"/data/0"):
            continue
        if method != 0 or ZIP64_SIZE in (stored, header):
            return None
        local = data.read(base + header, 30)
        if local[:4] != b"PK\x03\x04":
            return None
        skip = 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
        return base + header + skip, stored
    return None


def _central_directory(data: Any, base: int, size: int) -> tuple[int, int] | None:
    """(offset, length) of a zip's central directory, from its end record (torch writes no
    archive comment, so the record is the last 22 bytes), or its zip64 record when needed."""
    if size < 22:
        return None
    end = data.read(base + size - 22, 22)
    if end[:4] != b"PK\x05\x06":
        return None
    length, start = struct.unpack_from("<II", end, 12)
    if ZIP64_SIZE not in (length, start):
        return start, length
    locator = data.read(base + size - 42, 20)
    if size < 42 or locator[:4] != b"PK\x06\x07":
        return None
    record = data.read(base + int.from_bytes(locator[8:16], "little"), 56)
    if record[:4] != b"PK\x06\x06":
        return None
    length, start = struct.unpack_from("<QQ", record, 40)
    return start, length


def _uint8(buffer: Any) -> torch.Tensor:
    """A uint8 tensor over ``buffer`` without copying (empty buffers too)."""
    if len(buffer) == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():  # read-only chunks: only ever copied from, never written
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(buffer, dtype=torch.uint8)


class _Whole:
    """Plain bytes seen through the same ``segments``/``read`` interface as chunked files."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def segments(self, offset: int, length: int) -> list[memoryview]:
        return [memoryview(self.data)[offset : offset + length]]

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.data[offset : offset + length])

    def __len__(self) -> int:
        return len(self.data)

    def stream(self, buffer: int = io.DEFAULT_BUFFER_SIZE) -> io.BytesIO:
        return io.BytesIO(self.data)
