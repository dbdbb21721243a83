"""Checkpoints in and out of torch's DCP layout, optimizer state included.

``xirang ckpt import FOLDER RUN`` brings in a DCP checkpoint folder (``.metadata`` and
``__<rank>_<n>.distcp`` files, as torch's ``FileSystemWriter`` and torchtitan write them) as a
committed xirang checkpoint; ``xirang ckpt export RUN --format dcp`` writes one such folder of
its own, which torch, torchtitan and ``xirang ckpt import`` read.

Keys: xirang saves ``model.<name>`` and ``optim.state.<name>.<key>`` plus ``optim.param_groups``.
torchtitan keeps the model's tensors at the top level, the optimizer (flattened) under
``optimizer.`` (``optimizer.state.<name>.<key>``, ``optimizer.param_groups.<name>.<setting>``)
and the step in ``train_state.step``; both are understood.

The foreign ``.metadata`` is a pickle: it is read by an unpickler that builds DCP's metadata
classes and nothing else (any other global is refused), tensors by torch's weights-only rules.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from xirang import ConfigError
from xirang.checkpoint import (
    CheckpointStore,
    Collective,
    Manifest,
    MemoryFileSystem,
    RefusedCheckpoint,
    SaveResult,
    Snapshot,
    check_loadable,
    dcp_filesystem,
    dcp_names,
    dcpmeta,
    memory_reader,
    write_snapshot,
)

#: top-level keys of torchtitan's checkpoints that are not the model's tensors
NOT_MODEL = ("optimizer", "optim", "train_state", "lr_scheduler", "dataloader")
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata dataclasses, torch's sizes and dtypes; refuses any other global
    (a planted ``os.system`` or ``exec`` never gets called)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of DCP's metadata")


def read_metadata(folder: Path) -> Metadata:
    """The ``.metadata`` of a DCP folder, built without running code; ConfigError when it is
    missing or holds anything but DCP's metadata."""
    path = folder / dcpmeta.PICKLE_METADATA
    if not path.is_file():
        raise ConfigError(
            f"{folder}: no {dcpmeta.PICKLE_METADATA}, so not a DCP checkpoint folder (torch's "
            f"FileSystemWriter and torchtitan write one per step folder)"
        )
    try:
        with path.open("rb") as stream:
            metadata = _MetadataUnpickler(stream).load()
    except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as exc:
        raise RefusedCheckpoint(f"{path}: not DCP's metadata ({exc}); nothing was loaded") from None
    if not isinstance(metadata, Metadata):
        raise RefusedCheckpoint(f"{path}: holds a {type(metadata).__name__}, not DCP's Metadata")
    return metadata


def folder_reader(folder: Path, metadata: Metadata) -> Any:
    """A DCP reader over the files of a real folder that ``metadata`` names: xirang's reader
    (tensors by torch's weights-only rules, values checked before DCP loads them)."""
    names = {info.relative_path for info in (metadata.storage_data or {}).values()}
    files: dict[str, Any] = {}
    for name in names:
        path = (folder / name).resolve()
        if folder.resolve() not in path.parents or not path.is_file():
            raise ConfigError(f"{folder}: its metadata names {name!r}, which it does not hold")
        files[name] = path.read_bytes()
    files[dcpmeta.METADATA_FILE] = dcpmeta.to_json(metadata)
    return memory_reader(MemoryFileSystem(files))


def load_flat(reader: Any, metadata: Metadata) -> dict[str, Any]:
    """Every value of a checkpoint, whole, by its DCP key (``model.lin.weight``)."""
    state: dict[str, Any] = {
        key: torch.empty(tuple(md.size), dtype=md.properties.dtype)
        if isinstance(md, TensorStorageMetadata)
        else None
        for key, md in metadata.state_dict_metadata.items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, storage_reader=reader, no_dist=True)
    return state


def xirang_state(flat: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """``{"model": ..., "optim": ...}`` as xirang saves them, and the step (None if unknown),
    from the keys of a xirang export or a torchtitan checkpoint."""
    model: dict[str, Any] = {}
    state: dict[str, dict[str, Any]] = {}
    settings: dict[str, dict[str, Any]] = {}
    groups: list[dict[str, Any]] | None = None
    for key, value in flat.items():
        top, _, rest = key.partition(".")
        if top == "model":
            model[rest] = value
        elif top in ("optim", "optimizer") and rest == "param_groups":
            groups = list(value)
        elif top in ("optim", "optimizer"):
            kind, _, tail = rest.partition(".")
            name, _, field = tail.rpartition(".")
            target = state if kind == "state" else settings if kind == "param_groups" else None
            if target is None or not name:
                raise ConfigError(f"{key}: not an optimizer key this import understands")
            target.setdefault(name, {})[field] = value
        elif top not in NOT_MODEL:
            model[key] = value
    optim = {"state": state, "param_groups": groups or _groups(settings)}
    step = flat.get("train_state.step")
    return {"model": model, "optim": optim}, None if step is None else int(step)


def _groups(settings: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """torchtitan's per-parameter settings (``param_groups.<name>.lr``) as torch's groups:
    parameters with equal settings share a group, in the order they first appear."""
    groups: list[dict[str, Any]] = []
    for name, values in settings.items():
        found = next((g for g in groups if _same(g, values)), None)
        if found is None:
            found = {**values, "params": []}
            groups.append(found)
        found["params"].append(name)
    return groups


def _same(group: dict[str, Any], values: dict[str, Any]) -> bool:
    """Whether a group's settings (all but its ``params``) are ``values``."""
    keys = set(group) - {"params"}
    return keys == set(values) and all(_equal(group[k], values[k]) for k in keys)


def _equal(a: Any, b: Any) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and torch.equal(a, b)
    return bool(a == b)


def import_folder(folder: Path, store: CheckpointStore, step: int | None) -> SaveResult:
    """Commit the DCP checkpoint in ``folder`` into ``store`` as a xirang checkpoint of
    ``step`` (default: its ``train_state.step``)."""
    metadata = read_metadata(folder)
    flat = load_flat(folder_reader(folder, metadata), metadata)
    tensors, saved_step = xirang_state(flat)
    step = step if step is not None else saved_step
    if step is None:
        raise ConfigError(f"{folder}: no train_state.step in the checkpoint; give --step N")
    if not tensors["model"]:
        raise ConfigError(f"{folder}: no model tensors in the checkpoint")
    rank_state = {"rng": None, "data": None}  # not in a DCP checkpoint: resume starts them anew
    snap = Snapshot(step, tensors, rank_state, {"step": step, "imported_from": str(folder)})
    extra: dict[str, Any] = {"config": {}, "dataset_snapshot": None}
    return write_snapshot(snap, store, Collective(), extra)


def export_dcp(store: CheckpointStore, manifest: Manifest, out: Path) -> int:
    """Write the checkpoint's model and optimizer state and its step to ``out`` as a DCP
    folder of its own (torch's FileSystemWriter: ``.metadata``, ``__0_0.distcp``); returns
    the number of values written."""
    files = store.read_files(manifest, dcp_names(manifest.files))
    metadata = check_loadable(files, f"step {manifest.step}")
    flat = load_flat(memory_reader(dcp_filesystem(files)), metadata)
    state = _nest(flat, metadata.planner_data or {})
    state["train_state"] = {"step": torch.tensor(manifest.step)}
    out.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, storage_writer=FileSystemWriter(str(out)), no_dist=True)
    return len(flat) + 1


def _nest(flat: dict[str, Any], paths: dict[str, Any]) -> dict[str, Any]:
    """Flat DCP keys back into the saver's nesting (``{"model": {"lin.weight": ...}}``), by
    the key paths DCP's planner recorded."""
    nested: dict[Any, Any] = {}
    for key, value in flat.items():
        path = tuple(paths.get(key) or (key,))
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return nested
