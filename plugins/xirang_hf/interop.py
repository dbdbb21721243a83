"""The ``hf`` family's Hugging Face layout: its state is the transformers model's own, under
the wrapper's ``hf.`` prefix, so the mapping only renames (and leaves out tied copies, as
``save_pretrained`` does). On the way in, the renames transformers itself applies when it
loads a folder of that model type (GPT-NeoX/Pythia's ``embed_out`` -> ``lm_head``) apply too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from xirang.specs import HFInteropBase

PREFIX = "hf."


class HFLayout(HFInteropBase):
    def to_hf(
        self, settings: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The run's config (``model.config`` with its overrides) and the unprefixed tensors."""
        from xirang_hf.source import load_config

        config = load_config(settings)
        model_class = _causal_lm_class(config)
        config.architectures = [model_class.__name__]
        config.use_cache = True  # the exported model is for inference
        tied = getattr(model_class, "_tied_weights_keys", None) or ()
        skip = set(tied) if config.tie_word_embeddings else set()
        if settings.get("lora_rank"):  # the adapters merged into the weights they adapt
            from xirang_hf.lora import merged

            state = merged(settings, state)
        tensors = {
            name.removeprefix(PREFIX): t for name, t in state.items() if name.startswith(PREFIX)
        }
        return config.to_dict(), {k: v for k, v in tensors.items() if k not in skip}

    def save_adapter(self, settings: dict[str, Any], state: dict[str, Any], out: Any) -> int:
        """A LoRA run's adapters as peft's own folder (``adapter_config.json``,
        ``adapter_model.safetensors``), which ``PeftModel.from_pretrained`` loads onto the
        pretrained model (:mod:`xirang_hf.lora`)."""
        from xirang import ConfigError
        from xirang_hf.lora import save_adapter

        if not settings.get("lora_rank"):
            raise ConfigError(
                "--format peft: this run trained no adapters (model.lora_rank=0); use --format hf"
            )
        return save_adapter(settings, state, out)

    def from_hf(
        self, hf_config: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """No settings to compare (the run builds from a config.json); tensors renamed as
        transformers renames them on load, and prefixed."""
        rename = checkpoint_renames(hf_config)
        return {}, {PREFIX + rename(name): t for name, t in tensors.items()}


def checkpoint_renames(hf_config: dict[str, Any]) -> Callable[[str], str]:
    """transformers' own key renames for a checkpoint of ``hf_config``'s causal-LM class (by
    class name, else model type, as ``from_pretrained`` looks them up); only renames, since
    a tensor conversion (a merge, a split) needs the loader that owns it."""
    from transformers import AutoConfig
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, apply_renamings

    settings = {k: v for k, v in hf_config.items() if k != "model_type"}
    config = AutoConfig.for_model(hf_config["model_type"], **settings)
    model_class = _causal_lm_class(config)
    found = get_checkpoint_conversion_mapping(model_class.__name__)
    found = found or get_checkpoint_conversion_mapping(config.model_type) or []
    renamings = [t for t in found if isinstance(t, WeightRenaming)]
    return lambda name: apply_renamings(name, renamings)


def _causal_lm_class(config: Any) -> type:
    """The transformers causal-LM class of ``config``'s architecture (a model mapping holds
    one class per config class; only tokenizer mappings hold pairs)."""
    from transformers import AutoModelForCausalLM

    found = AutoModelForCausalLM._model_mapping[type(config)]
    if not isinstance(found, type):
        raise TypeError(f"transformers maps {type(config).__name__} to {found!r}, not a class")
    return found
