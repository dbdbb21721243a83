"""The ``hf`` family's Hugging Face layout: its state is the transformers model's own, under
the wrapper's ``hf.`` prefix, so the mapping only renames (and leaves out tied copies, as
``save_pretrained`` does)."""

from __future__ import annotations

from typing import Any

import torch

PREFIX = "hf."


class HFLayout:
    def to_hf(
        self, settings: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The run's config (``model.config`` with its overrides) and the unprefixed tensors."""
        from transformers import AutoModelForCausalLM

        from xirang_hf.source import load_config

        config = load_config(settings)
        model_class = AutoModelForCausalLM._model_mapping[type(config)]
        config.architectures = [model_class.__name__]
        config.use_cache = True  # the exported model is for inference
        tied = getattr(model_class, "_tied_weights_keys", None) or ()
        skip = set(tied) if config.tie_word_embeddings else set()
        tensors = {
            name.removeprefix(PREFIX): t for name, t in state.items() if name.startswith(PREFIX)
        }
        return config.to_dict(), {k: v for k, v in tensors.items() if k not in skip}

    def from_hf(
        self, hf_config: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """No settings to compare (the run builds from a config.json); tensors prefixed."""
        return {}, {PREFIX + name: t for name, t in tensors.items()}
