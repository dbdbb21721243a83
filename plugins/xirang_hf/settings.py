"""The ``model`` section of ``model=hf``, and its check when the config is composed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang import ConfigError
from xirang.lora import LoraSettings, check_run, check_settings


@dataclass
class HFSettings(LoraSettings):
    """``config``: a local directory with config.json, or the file ("" = ``pretrained``'s).
    ``pretrained``: a local directory with config.json and safetensors weights ("" = none).
    ``max_seq_len`` / ``vocab_size``: 0 takes the config's value, anything else overrides it.
    ``lora_*``: LoRA adapters (:class:`xirang.lora.LoraSettings`; :mod:`xirang_hf.lora`), on
    peft's choice of layers for the architecture when ``lora_targets`` names none."""

    config: str = ""
    pretrained: str = ""
    max_seq_len: int = 0
    vocab_size: int = 0

    #: LoRA runs under parallel=single or ddp, with peft installed
    check_run = staticmethod(check_run)

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """Before any worker starts: the config must build a causal LM in transformers (tried
        on the meta device, so no memory is spent), and the zeros are replaced by the config's
        values so the planner, the data and the workers see real sizes."""
        import torch
        from transformers import AutoModelForCausalLM

        from xirang_hf.source import config_path, first_line, load_config

        check_settings(settings)
        path = config_path(settings)
        config = load_config(settings)
        try:
            with torch.device("meta"):
                built = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
        except Exception as exc:  # transformers raises many kinds for configs it cannot build
            raise ConfigError(
                f"model.config={path}: transformers cannot build a causal LM from it "
                f"({type(exc).__name__}: {first_line(exc)})"
            ) from None
        if settings["lora_rank"]:
            from xirang_hf.lora import check_targets

            check_targets(settings, built, str(path))
        positions = getattr(config, "max_position_embeddings", None)
        if not positions:
            raise ConfigError(
                f"model.max_seq_len: {path} names no max_position_embeddings; set "
                f"model.max_seq_len=<longest sequence>"
            )
        return {
            **settings,
            "config": str(path),
            "max_seq_len": int(positions),
            "vocab_size": int(config.vocab_size),
        }
