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
GENERATION_CONFIG = "generation_config.json"
#: where transformers keeps a tokenizer's chat template beside its tokenizer_config.json
CHAT_TEMPLATE = "chat_template.jinja"


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
    (the pretrained folder's own, else xirang's sampling defaults). ``model`` is the run's
    ``model`` config section; ``special`` the tokenizer's bos/eos/pad ids
    (:func:`special_token_ids`), which join the mapping's (a list of eos ids keeps them all).
    No path of this machine goes in: transformers' ``_name_or_path`` is left out."""
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
    hf_config = with_special_ids(hf_config, special or {})
    hf_config.pop("_name_or_path", None)
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(out / "model.safetensors"),
        metadata={"format": "pt", "step": str(manifest.step)},  # transformers requires "pt"
    )
    (out / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
    generation = generation_config(hf_config, settings.get("pretrained") or "")
    (out / GENERATION_CONFIG).write_text(json.dumps(generation, indent=2) + "\n")
    return len(tensors)


def with_special_ids(hf_config: dict[str, Any], special: dict[str, int]) -> dict[str, Any]:
    """``hf_config`` with the tokenizer's bos/eos/pad ids. Where the config lists several eos
    ids (Llama 3.1 ends a turn with any of three), the list stays, the tokenizer's eos in it:
    generation must stop at each of them, not only at the first."""
    merged = {**hf_config, **special}
    eos, listed = special.get("eos_token_id"), hf_config.get("eos_token_id")
    if eos is not None and isinstance(listed, list):
        merged["eos_token_id"] = listed if eos in listed else [eos, *listed]
    return merged


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
    so ``AutoTokenizer.from_pretrained(out)`` encodes as the run did and, after a chat run,
    ``apply_chat_template`` renders as it trained (the tokenizer folder's template, else the
    plain one the run recorded in ``runtime.chat_template``); returns its
    :func:`special_token_ids`, named in ``tokenizer_config.json`` too. Runs from before the
    tokenizer group trained on bytes, which is what their config then gets."""
    config = {**config, "tokenizer": config.get("tokenizer") or {"name": "bytes"}}
    tokenizer = open_tokenizer(config)
    tokenizer.save(out)
    path = out / TOKENIZER_CONFIG
    settings = json.loads(path.read_text()) if path.is_file() else {}
    settings.pop("name_or_path", None)  # the folder it was read from, here
    template = (config.get("runtime") or {}).get("chat_template")
    if template and not (out / CHAT_TEMPLATE).is_file() and not settings.get("chat_template"):
        settings["chat_template"] = template  # the plain template a chat run trained with
    path.write_text(json.dumps(settings, indent=2) + "\n")
    if not isinstance(tokenizer, NamesEosToken) or not tokenizer.eos_token:
        return {}
    eos = tokenizer.eos_token
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


def generation_config(hf_config: dict[str, Any], pretrained: str) -> dict[str, Any]:
    """The pretrained folder's ``generation_config.json`` (its authors' sampling and stop
    ids: fine-tuning changes neither), its missing token ids from ``hf_config``; without one,
    sampling as xirang's end-of-run sample does it (top-k 40, temperature 0.8)."""
    tokens = {
        key: hf_config[key]
        for key in ("bos_token_id", "eos_token_id", "pad_token_id")
        if hf_config.get(key) is not None
    }
    source = Path(pretrained).expanduser() / GENERATION_CONFIG if pretrained else None
    if source is not None and source.is_file():
        try:
            own = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{source}: not a JSON generation config ({exc})") from None
        return {**tokens, **own}
    return {"do_sample": True, "temperature": 0.8, "top_k": 40, **tokens}
