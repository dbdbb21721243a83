"""Weights out of a checkpoint, for use outside xirang: plain safetensors under xirang's own
names, or a Hugging Face directory (``--format hf``) through the model family's mapping.

Checkpoints are read through DCP's metadata (JSON) and the chunk store; nothing is unpickled."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from xirang import ConfigError
from xirang.checkpoint import (
    CheckpointStore,
    Manifest,
    check_loadable,
    dcp_filesystem,
    dcp_names,
    memory_reader,
)
from xirang.data import open_tokenizer

MODEL_PREFIX = "model."
TOKENIZER_CONFIG = "tokenizer_config.json"


@runtime_checkable
class NamesEosToken(Protocol):
    """A tokenizer over a Hugging Face ``tokenizers`` backend that names the token ending each
    document (``tokenizer=hf``): an export writes its special tokens' ids into the config."""

    eos_token: str
    backend: Any


def model_tensors(store: CheckpointStore, manifest: Manifest) -> dict[str, torch.Tensor]:
    """Every model tensor of a checkpoint, whole (shards joined), by its module name.

    Needs no model class: the tensors' names, shapes and dtypes come from DCP's metadata."""
    files = store.read_files(manifest, dcp_names(manifest.files))
    metadata = check_loadable(files, f"step {manifest.step}")
    fs = dcp_filesystem(files)
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


def export_hf(
    store: CheckpointStore,
    manifest: Manifest,
    out: Path,
    model: dict[str, Any],
    registry: Any,
    special: dict[str, int] | None = None,
) -> int:
    """Write a directory ``transformers`` loads (``from_pretrained(out)``): ``config.json`` and
    ``model.safetensors`` from the family's Hugging Face mapping, and ``generation_config.json``
    with xirang's sampling defaults. ``model`` is the run's ``model`` config section;
    ``special`` the tokenizer's bos/eos/pad ids (:func:`special_token_ids`), which take the
    place of the mapping's."""
    from safetensors.torch import save_file

    spec = registry.spec("model", model["family"])
    interop = spec.load_hf()
    if interop is None:
        raise ConfigError(
            f"--format hf: the model family '{spec.name}' has no Hugging Face mapping; "
            f"use --format safetensors"
        )
    settings = {k: v for k, v in model.items() if k not in ("family", "name")}
    hf_config, tensors = interop.to_hf(settings, model_tensors(store, manifest))
    hf_config.update(special or {})
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt", "step": str(manifest.step)},  # transformers requires "pt"
    )
    (out / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(generation_config(hf_config), indent=2))
    return len(tensors)


def export_adapter(
    store: CheckpointStore, manifest: Manifest, out: Path, model: dict[str, Any], registry: Any
) -> int:
    """Write the adapters a run trained (LoRA) as a folder ``peft`` loads, through the family's
    Hugging Face mapping; returns the number of adapter tensors."""
    spec = registry.spec("model", model["family"])
    interop = spec.load_hf()
    if interop is None:
        raise ConfigError(
            f"--format peft: the model family '{spec.name}' has no Hugging Face mapping"
        )
    settings = {k: v for k, v in model.items() if k not in ("family", "name")}
    out.mkdir(parents=True, exist_ok=True)
    return interop.save_adapter(settings, model_tensors(store, manifest), out)


def export_tokenizer(config: dict[str, Any], out: Path) -> dict[str, int]:
    """The run's tokenizer beside the weights (``tokenizer.json``, ``tokenizer_config.json``),
    so ``AutoTokenizer.from_pretrained(out)`` encodes as the run did; returns its
    :func:`special_token_ids`, named in ``tokenizer_config.json`` too. Runs from before the
    tokenizer group trained on bytes, which is what their config then gets."""
    config = {**config, "tokenizer": config.get("tokenizer") or {"name": "bytes"}}
    tokenizer = open_tokenizer(config)
    tokenizer.save(out)
    if not isinstance(tokenizer, NamesEosToken) or not tokenizer.eos_token:
        return {}
    eos = tokenizer.eos_token
    path = out / TOKENIZER_CONFIG
    settings = json.loads(path.read_text()) if path.is_file() else {}
    for key in ("bos_token", "eos_token", "pad_token"):
        settings[key] = settings.get(key) or eos  # the source folder's own names stay
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return special_token_ids(tokenizer.backend, settings)


def special_token_ids(backend: Any, settings: dict[str, Any]) -> dict[str, int]:
    """``bos/eos/pad_token_id`` of the tokens ``settings`` (a tokenizer_config) names: the run
    ends every document with its eos token, so generation stops there, and a batch pads with
    it (GPT-2's and Pythia's convention) unless the tokenizer names its own pad token."""
    ids = {}
    for key in ("bos_token", "eos_token", "pad_token"):
        token = settings[key]
        token = token.get("content") if isinstance(token, dict) else token  # an AddedToken
        found = backend.token_to_id(token)
        if found is not None:
            ids[f"{key}_id"] = found
    return ids


def generation_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """Sampling as xirang's end-of-run sample does it (top-k 40, temperature 0.8)."""
    tokens = {
        key: hf_config[key]
        for key in ("bos_token_id", "eos_token_id", "pad_token_id")
        if hf_config.get(key) is not None
    }
    return {"do_sample": True, "temperature": 0.8, "top_k": 40, **tokens}
