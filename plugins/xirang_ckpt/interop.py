"""Checkpoints in and out of torch's DCP layout, optimizer state included.

``xirang ckpt import FOLDER RUN`` brings in a DCP checkpoint folder (``.metadata`` and
``__<rank>_<n>.distcp`` files, as torch's ``FileSystemWriter`` and torchtitan write them) as a
committed xirang checkpoint; ``xirang ckpt export RUN --format dcp`` writes one such folder of
its own, which torch and ``xirang ckpt import`` read, and ``--format torchtitan`` one that
torchtitan's ``CheckpointManager`` loads.

Keys: xirang saves ``model.<name>`` and ``optim.state.<name>.<key>`` plus ``optim.param_groups``.
torchtitan keeps the model's tensors at the top level, the optimizer (flattened) under
``optimizer.`` (``optimizer.state.<name>.<key>``, ``optimizer.param_groups.<name>.<setting>``)
and the step in ``train_state.step``; both are understood. torchtitan's own names, and groups
other than the resuming model's, are brought to that model by :mod:`xirang_ckpt.fit`.

The foreign ``.metadata`` is a pickle: it is read by an unpickler that builds DCP's metadata
classes and nothing else (any other global is refused), tensors by torch's weights-only rules.
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
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
from xirang_ckpt.fit import (
    TargetModel,
    by_field,
    fit,
    from_titan,
    per_parameter,
    renamed,
    same_setting,
)

#: a model tensor only torchtitan's Llama 3 names so
TITAN_MARK = "tok_embeddings.weight"
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


@dataclass
class Imported:
    """A foreign checkpoint's values, sorted: model tensors and optimizer state by parameter
    name, the optimizer's settings per parameter (torchtitan's flattened layout) or as torch's
    groups, and the step (None if it holds none)."""

    model: dict[str, Any] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[dict[str, Any]] | None = None
    step: int | None = None

    @property
    def titan(self) -> bool:
        """Whether the model tensors carry torchtitan's Llama 3 names."""
        return TITAN_MARK in self.model


def sort_values(flat: dict[str, Any]) -> Imported:
    """The values of a xirang export or a torchtitan checkpoint, by what they are."""
    found = Imported()
    for key, value in flat.items():
        top, _, rest = key.partition(".")
        if top == "model":
            found.model[rest] = value
        elif top in ("optim", "optimizer") and rest == "param_groups":
            found.groups = list(value)
        elif top in ("optim", "optimizer"):
            kind, _, tail = rest.partition(".")
            name, _, setting = tail.rpartition(".")
            target = {"state": found.state, "param_groups": found.settings}.get(kind)
            if target is None or not name:
                raise ConfigError(f"{key}: not an optimizer key this import understands")
            target.setdefault(name, {})[setting] = value
        elif top not in NOT_MODEL:
            found.model[key] = value
    if found.settings and all("params" in v for v in found.settings.values()):
        indexed = sorted(found.settings.items(), key=lambda item: int(item[0]))
        found.groups, found.settings = [group for _, group in indexed], {}  # torch's groups
    step = flat.get("train_state.step")
    found.step = None if step is None else int(step)
    return found


def xirang_state(found: Imported) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}`` as xirang saves them, the groups as the source had
    them (no target model to bring them to)."""
    groups = found.groups or _groups(found.settings)
    return {"model": found.model, "optim": {"state": found.state, "param_groups": groups}}


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
    return keys == set(values) and all(same_setting(group, values, k) for k in keys)


def import_folder(
    folder: Path,
    store: CheckpointStore,
    step: int | None,
    target: TargetModel | None = None,
    model_only: bool = False,
) -> SaveResult:
    """Commit the DCP checkpoint in ``folder`` into ``store`` as a xirang checkpoint of
    ``step`` (default: its ``train_state.step``), brought to ``target`` when one is given
    (:mod:`xirang_ckpt.fit`); ``model_only``: the weights alone."""
    metadata = read_metadata(folder)
    found = sort_values(load_flat(folder_reader(folder, metadata), metadata))
    step = step if step is not None else found.step
    if step is None:
        raise ConfigError(f"{folder}: no train_state.step in the checkpoint; give --step N")
    if not found.model:
        raise ConfigError(f"{folder}: no model tensors in the checkpoint")
    tensors = _tensors(found, target, model_only)
    rank_state = {"rng": None, "data": None}  # not in a DCP checkpoint: resume starts them anew
    snap = Snapshot(step, tensors, rank_state, {"step": step, "imported_from": str(folder)})
    extra: dict[str, Any] = {"config": {}, "dataset_snapshot": None}
    return write_snapshot(snap, store, Collective(), extra)


def _tensors(found: Imported, target: TargetModel | None, model_only: bool) -> dict[str, Any]:
    """What the imported checkpoint holds: fitted to ``target``, or as the source has it."""
    if target is None and found.titan:
        raise ConfigError(
            f"the checkpoint has torchtitan's names ({TITAN_MARK}): name the model that will "
            f"resume it, e.g. --model family=llama dim=4096 n_layers=32 n_heads=32 "
            f"n_kv_heads=8 ffn_dim=14336 vocab_size=128256 (or import into its run directory)"
        )
    settings = per_parameter(found.settings, found.groups)
    if target is None:
        tensors = xirang_state(found)
        return {"model": tensors["model"]} if model_only else tensors
    model, state = found.model, found.state
    if found.titan:
        model, state, settings = from_titan(target, model, state, settings)
    return fit(target, model, state, settings, model_only)


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


def export_torchtitan(
    store: CheckpointStore, manifest: Manifest, out: Path, target: TargetModel
) -> int:
    """Write the checkpoint as a step folder of torchtitan's ``CheckpointManager``: the model
    at the top level under its Llama 3 names (as its model's ``state_dict`` gives them, q, k
    and v apart), the optimizer flattened under ``optimizer.`` (keyed by its parameters,
    ``wqkv`` fused) and the step under ``train_state``; returns the number of values."""
    files = store.read_files(manifest, dcp_names(manifest.files))
    metadata = check_loadable(files, f"step {manifest.step}")
    found = sort_values(load_flat(memory_reader(dcp_filesystem(files)), metadata))
    interop, family = target.interop(), target.settings

    def fused(tensors: dict[str, Any]) -> dict[str, Any]:
        return dict(interop.to_torchtitan(family, tensors, True))

    flat: dict[str, Any] = dict(interop.to_torchtitan(family, found.model, False))
    for key, values in by_field(found.state).items():
        flat.update({f"optimizer.state.{n}.{key}": v for n, v in fused(values).items()})
    settings = renamed(fused, per_parameter(found.settings, found.groups))
    for name, values in settings.items():
        flat.update({f"optimizer.param_groups.{name}.{k}": v for k, v in values.items()})
    flat.update({"train_state.step": manifest.step, "train_state.ntokens_seen": 0})
    out.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(flat, storage_writer=FileSystemWriter(str(out)), no_dist=True)
    return len(flat)


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
