"""DCP storage that keeps tensors as their raw bytes, so a restore is one copy per tensor.

torch.distributed.checkpoint's own file writer wraps every tensor in a ``torch.save`` archive,
and its reader unpacks each with ``torch.load``: a zip parse, an allocation and a copy per
tensor before the copy into the model. Here each rank's file is the tensors' bytes back to back
(their shapes and dtypes are in DCP's metadata already), and the reader copies each straight
from the verified chunks into the tensor DCP resolves for it. Planning, resharding and the
metadata stay DCP's, but the metadata is written and read as JSON (:mod:`dcpmeta`) and
non-tensor values are loaded by torch's weights-only rules: reading a checkpoint runs no code.
Files of torch's own writer (``.distcp``, pickled ``.metadata``) are refused.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

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
from xirang_core.checkpoint.chunks import CorruptCheckpoint, RefusedCheckpoint

RAW_SUFFIX = ".raw"


class RawWriter(FileSystemWriter):
    """Writes one file per rank holding every tensor's bytes and every blob, back to back."""

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        name = f"{plan.storage_data.prefix}0{RAW_SUFFIX}"
        parts: list[Any] = []
        results: list[WriteResult] = []
        offset = 0
        for item in plan.items:
            data = planner.resolve_data(item)
            blob = data.getbuffer() if isinstance(data, io.BytesIO) else _tensor_bytes(data)
            parts.append(blob)
            info = _StorageInfo(name, offset, len(blob))
            results.append(WriteResult(item.index, len(blob), info))
            offset += len(blob)
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as stream:
            for blob in parts:
                stream.write(blob)
        future: Future[list[WriteResult]] = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """The metadata as JSON (DCP's own writer pickles it)."""
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for rs in results for wr in rs}
        path = self.fs.concat_path(self.path, dcpmeta.METADATA_FILE)
        with self.fs.create_stream(path, "wb") as stream:
            stream.write(dcpmeta.to_json(metadata))


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A CPU tensor's elements as bytes, in its dtype's native layout (any dtype, bf16 too)."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


class RawReader(FileSystemReader):
    """Reads what :class:`RawWriter` wrote, straight into the tensors DCP's planner resolves;
    anything else (torch's own pickled format) is refused before a byte of it is loaded."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The JSON metadata; a checkpoint with only DCP's pickled ``.metadata`` is refused."""
        path = self.fs.concat_path(self.path, dcpmeta.METADATA_FILE)
        if not self.fs.exists(path):
            if self.fs.exists(self.fs.concat_path(self.path, dcpmeta.PICKLE_METADATA)):
                raise dcpmeta.pickle_refusal("checkpoint")
            raise CorruptCheckpoint(f"checkpoint: no {dcpmeta.METADATA_FILE}")
        return dcpmeta.from_json(bytes(self.fs.data(path)), "checkpoint")

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, **kw: Any) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, **kw)
        self.metadata = metadata

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        opened: dict[str, Any] = {}
        for req in plan.items:
            info = self._info(req)
            if not info.relative_path.endswith(RAW_SUFFIX):
                raise RefusedCheckpoint(
                    f"checkpoint: {info.relative_path} is not xirang's raw format (torch's own "
                    f"files are pickles, which xirang does not load)"
                )
            if info.relative_path not in opened:
                opened[info.relative_path] = self._file(info.relative_path)
            data = opened[info.relative_path]
            if req.type == LoadItemType.BYTE_IO:
                value = data.read(info.offset, info.length)
                planner.load_bytes(req, dcpmeta.safe_value(value, req.storage_index.fqn))
            else:
                target = planner.resolve_tensor(req).detach()
                self._fill(target, req, data, info)
                planner.commit_tensor(req, target)
        future: Future[None] = Future()
        future.set_result(None)
        return future

    def _info(self, req: ReadItem) -> _StorageInfo:
        return self.storage_data[req.storage_index]

    def _file(self, relative_path: str) -> Any:
        """The file's bytes as the filesystem holds them (chunked files stay unjoined)."""
        data = self.fs.data(self.fs.concat_path(self.path, relative_path))
        return data if hasattr(data, "segments") else _Whole(data)

    def _fill(self, target: torch.Tensor, req: ReadItem, data: Any, info: _StorageInfo) -> None:
        """Copy the stored piece into ``target``: segment by segment when it is the whole
        stored chunk and ``target`` is dense; through a temporary otherwise (resharding)."""
        sizes, dtype = self._stored_shape(req.storage_index)
        whole = list(req.lengths) == list(sizes) and not any(req.storage_offsets)
        if whole and target.is_contiguous() and target.dtype == dtype:
            dest = target.reshape(-1).view(torch.uint8)
            done = 0
            for segment in data.segments(info.offset, info.length):
                dest[done : done + len(segment)].copy_(_uint8(segment))
                done += len(segment)
            if done != dest.numel():
                raise ValueError(f"{req.storage_index.fqn}: {done} bytes for {dest.numel()}")
            return
        stored = _uint8(bytearray(data.read(info.offset, info.length))).view(dtype).view(sizes)
        for dim, (start, length) in enumerate(zip(req.storage_offsets, req.lengths, strict=True)):
            stored = stored.narrow(dim, start, length)
        target.copy_(stored)

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
