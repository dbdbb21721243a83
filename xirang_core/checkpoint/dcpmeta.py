"""DCP's metadata as JSON, and non-tensor values loaded by torch's weights-only rules.

torch.distributed.checkpoint writes its ``Metadata`` (every tensor's name, shape, dtype and
where its bytes are) with ``pickle``, and its planner loads non-tensor values with
``torch.load(weights_only=False)``. Unpickling runs whatever code the file names, and whoever
can write to a checkpoint folder can also recompute its checksums, so a checkpoint that is
loaded that way is a way to run code on every machine that verifies, exports or resumes it.
Here the metadata is plain JSON rebuilt into DCP's dataclasses, and non-tensor values pass
through ``torch.load(weights_only=True)`` first, so reading a checkpoint runs no code.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from xirang_core.checkpoint.chunks import CorruptCheckpoint, RefusedCheckpoint

#: the JSON metadata DCP's reader is given instead of its pickled ``.metadata``
METADATA_FILE = "metadata.json"
#: DCP's own (pickled) metadata file name, refused on read
PICKLE_METADATA = ".metadata"
FORMAT = "xirang-dcp-json-1"


def pickle_refusal(where: str) -> RefusedCheckpoint:
    """The one message for a checkpoint whose DCP metadata is a pickle."""
    return RefusedCheckpoint(
        f"{where}: its DCP metadata is a pickle ({PICKLE_METADATA}), which can run code when "
        f"loaded; xirang loads no pickle. It was written by torch's own DCP writer, an older "
        f"xirang, or someone else: resave it with this xirang from a trusted copy"
    )


def to_json(metadata: Metadata) -> bytes:
    """``metadata`` as JSON (every field a load needs; nothing that could name code)."""
    tensors: dict[str, Any] = {}
    values: list[str] = []
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            values.append(fqn)
            continue
        tensors[fqn] = {
            "dtype": str(md.properties.dtype).removeprefix("torch."),
            "requires_grad": md.properties.requires_grad,
            "size": list(md.size),
            "chunks": [[list(c.offsets), list(c.sizes)] for c in md.chunks],
        }
    storage = [
        {
            "fqn": index.fqn,
            "offset": None if index.offset is None else list(index.offset),
            "index": index.index,
            "path": info.relative_path,
            "at": info.offset,
            "length": info.length,
        }
        for index, info in (metadata.storage_data or {}).items()
    ]
    doc = {
        "format": FORMAT,
        "version": metadata.version,
        "tensors": tensors,
        "values": values,
        "planner_data": {k: list(v) for k, v in (metadata.planner_data or {}).items()},
        "storage": storage,
    }
    return json.dumps(doc).encode()


def from_json(data: bytes, where: str) -> Metadata:
    """DCP ``Metadata`` from :func:`to_json`'s bytes; CorruptCheckpoint when malformed."""
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, need {FORMAT!r}")
        state: dict[str, Any] = {fqn: BytesStorageMetadata() for fqn in doc["values"]}
        state.update({fqn: _tensor(str(fqn), md) for fqn, md in doc["tensors"].items()})
        storage = {
            _index(s): _StorageInfo(str(s["path"]), int(s["at"]), int(s["length"]))
            for s in doc["storage"]
        }
        planner = {str(k): tuple(_path_part(p) for p in v) for k, v in doc["planner_data"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptCheckpoint(f"{where}: DCP metadata is not valid ({exc})") from None
    return Metadata(state, planner, storage, version=doc.get("version"))


def _tensor(fqn: str, md: dict[str, Any]) -> TensorStorageMetadata:
    dtype = getattr(torch, str(md["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {md['dtype']!r}")
    chunks = [ChunkStorageMetadata(_size(o), _size(s)) for o, s in md["chunks"]]
    props = TensorProperties(dtype=dtype, requires_grad=bool(md["requires_grad"]))
    tensor = TensorStorageMetadata(props, _size(md["size"]), chunks)
    _check_tiles(fqn, tensor)
    return tensor


def _check_tiles(fqn: str, tensor: TensorStorageMetadata) -> None:
    """A tensor's stored chunks lie inside its shape and fill it exactly, as every save
    writes them: a shape edited to claim more (8 PiB) is refused here, before anything is
    allocated for it."""
    shape = list(tensor.size)
    held = 0
    for chunk in tensor.chunks:
        offsets, sizes = list(chunk.offsets), list(chunk.sizes)
        inside = len(offsets) == len(sizes) == len(shape) and all(
            o + n <= d for o, n, d in zip(offsets, sizes, shape, strict=True)
        )
        if not inside:
            raise ValueError(
                f"tensor {fqn}: a stored chunk at {offsets} of {sizes} lies outside its "
                f"shape {shape}"
            )
        held += math.prod(sizes)
    if held != math.prod(shape):
        raise ValueError(
            f"tensor {fqn}: its shape {shape} holds {math.prod(shape)} elements, its stored "
            f"chunks hold {held}"
        )


def _index(entry: dict[str, Any]) -> MetadataIndex:
    offset = entry["offset"]
    index = entry["index"]
    return MetadataIndex(
        str(entry["fqn"]),
        None if offset is None else _size(offset),
        None if index is None else int(index),
    )


def _size(values: list[Any]) -> torch.Size:
    sizes = [int(v) for v in values]
    if any(v < 0 for v in sizes):
        raise ValueError(f"negative size or offset in {sizes}")
    return torch.Size(sizes)


def _path_part(part: Any) -> str | int:
    if isinstance(part, bool) or not isinstance(part, str | int):
        raise ValueError(f"planner path element {part!r}")
    return part


def safe_value(data: bytes, where: str) -> io.BytesIO:
    """A non-tensor value's bytes, checked by ``torch.load(weights_only=True)`` and saved again,
    so DCP's planner (which loads with ``weights_only=False``) only ever sees plain data that
    this process wrote itself."""
    try:
        value = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # UnpicklingError, or a torch.save archive that is torn
        raise RefusedCheckpoint(
            f"{where}: a stored value is not plain data ({_reason(exc)}); it would need an "
            f"unrestricted pickle load, and xirang loads no pickle"
        ) from None
    out = io.BytesIO()
    torch.save(value, out)
    out.seek(0)
    return out


def _reason(exc: Exception) -> str:
    """The line of torch's long weights-only message that says what was refused."""
    lines = [line.strip() for line in str(exc).splitlines()]
    found = next((line for line in lines if line.startswith("WeightsUnpickler error")), "")
    return found or f"{type(exc).__name__} from torch's weights-only loading"
