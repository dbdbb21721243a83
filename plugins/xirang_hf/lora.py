"""LoRA fine-tuning of a ``model=hf`` model through ``peft``: ``model.lora_rank=8`` (0: off).

After the pretrained weights are in, ``peft.get_peft_model`` wraps the transformers model: the
named linear layers (``model.lora_targets``; none named: peft's choice for the architecture)
get rank-``r`` adapters scaled by ``lora_alpha / r``, and every pretrained weight is frozen, so
the optimizer, the gradients and DDP's all-reduce see only the adapters. Checkpoints hold the
whole wrapped model (its frozen weights too) and resume exactly. ``xirang ckpt export --format
hf`` merges the adapters into the weights (peft's ``merge_and_unload``) and writes a plain
transformers model.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xirang.lora import base_model_name, lora_config
from xirang.lora import check_targets as check_targets_of

#: peft's warning after a merge whose embeddings are stored apart (false when they are equal)
UNTIED = "Input and output embeddings are no longer tied after merging"


def attach(model: nn.Module, settings: dict[str, Any]) -> nn.Module:
    """``model`` (a transformers causal LM) with LoRA adapters; its own weights frozen."""
    from peft import get_peft_model

    return get_peft_model(model, lora_config(settings))  # no targets: peft's for the model


def merged(settings: dict[str, Any], state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A LoRA run's state (keys under ``hf.``, the adapters beside the frozen weights) as the
    plain transformers model's: the adapters merged into the weights by peft, the names back
    to the model's own."""
    # peft merges in place: into copies, so the state given stays as it was
    copied = {k: v.clone() if ".base_layer." in k else v for k, v in state.items()}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        plain = _wrapped(settings, copied).merge_and_unload()
    for warning in said:  # the others as peft gave them
        if not (UNTIED in str(warning.message) and _still_tied(plain)):
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return {f"hf.{name}": t.detach() for name, t in plain.state_dict().items()}


def _still_tied(model: Any) -> bool:
    """Whether the merged model's input and output embeddings still hold the same values:
    peft's "no longer tied" compares where they are stored, and the state loaded into the
    model gave them two copies of one tensor, so it says so though no adapter touched them."""
    into, out = model.get_input_embeddings(), model.get_output_embeddings()
    return into is not None and out is not None and torch.equal(into.weight, out.weight)


def save_adapter(settings: dict[str, Any], state: dict[str, torch.Tensor], out: Path) -> int:
    """The run's adapters written by peft itself (``save_pretrained``: the adapter weights and
    ``adapter_config.json``); returns how many tensors."""
    wrapped = _wrapped(settings, state)
    # peft names the base (adapter_config.json, its README's card and tags) after the model's
    # name_or_path, the absolute path of the config.json read: the folder, relative, instead
    name = base_model_name(settings)
    base = wrapped.get_base_model()
    base.name_or_path = base.config.name_or_path = name
    for config in wrapped.peft_config.values():
        config.base_model_name_or_path = name
    wrapped.save_pretrained(str(out))
    return sum(1 for name, _ in wrapped.named_parameters() if ".lora_" in name)


def _wrapped(settings: dict[str, Any], state: dict[str, torch.Tensor]) -> Any:
    """The run's transformers model with its adapters, holding ``state``'s tensors."""
    from transformers import AutoModelForCausalLM

    from xirang_hf.source import load_config

    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(load_config(settings), dtype=torch.float32)
        wrapped = attach(base, settings)
    wrapped.load_state_dict(_unprefixed(state), strict=True, assign=True)
    return wrapped


def check_targets(settings: dict[str, Any], model: nn.Module, where: str) -> None:
    """The named targets must be linear layers of ``model`` (GPT-2's ``Conv1D`` among them)."""
    linear = {n.rpartition(".")[2] for n, m in model.named_modules() if _linear(m)}
    check_targets_of(settings["lora_targets"], sorted(linear), where)


def _linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"  # GPT-2's


def _unprefixed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("hf."): v for k, v in state.items() if k.startswith("hf.")}
