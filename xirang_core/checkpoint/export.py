"""Weights out of a checkpoint, for use outside xirang (safetensors)."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from xirang_core.checkpoint.manifest import Manifest
from xirang_core.checkpoint.memfs import MemoryFileSystem, memory_reader
from xirang_core.checkpoint.snapshot import DCP_PREFIX
from xirang_core.checkpoint.store import CheckpointStore

MODEL_PREFIX = "model."


def model_tensors(store: CheckpointStore, manifest: Manifest) -> dict[str, torch.Tensor]:
    """Every model tensor of a checkpoint, whole (shards joined), by its module name.

    Needs no model class: the tensors' names, shapes and dtypes come from DCP's metadata."""
    names = [n for n in manifest.files if n.startswith(DCP_PREFIX)]
    files = store.read_files(manifest, names)
    fs = MemoryFileSystem({n[len(DCP_PREFIX) :]: d for n, d in files.items()})
    reader = memory_reader(fs)
    metadata = reader.read_metadata()
    template = {
        key[len(MODEL_PREFIX) :]: torch.empty(tuple(md.size), dtype=md.properties.dtype)
        for key, md in metadata.state_dict_metadata.items()
        if key.startswith(MODEL_PREFIX) and isinstance(md, TensorStorageMetadata)
    }
    state = {"model": template}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, storage_reader=memory_reader(fs), no_dist=True)
    return state["model"]


def export_safetensors(store: CheckpointStore, manifest: Manifest, out: Path) -> int:
    """Write the checkpoint's model weights to ``out``; returns the number of tensors."""
    from safetensors.torch import save_file

    tensors = {k: v.contiguous() for k, v in model_tensors(store, manifest).items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata={"step": str(manifest.step), "format": "xirang"})
    return len(tensors)
