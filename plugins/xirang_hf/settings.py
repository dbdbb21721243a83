"""The ``model`` section of ``model=hf``, and its check when the config is composed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xirang import ConfigError


@dataclass
class HFSettings:
    """``config``: a local directory with config.json, or the file ("" = ``pretrained``'s).
    ``pretrained``: a local directory with config.json and safetensors weights ("" = none).
    ``max_seq_len`` / ``vocab_size``: 0 takes the config's value, anything else overrides it.
    ``lora_rank``: LoRA adapters of that rank over the frozen pretrained weights (0: off; see
    :mod:`xirang_hf.lora`), scaled by ``lora_alpha / lora_rank``, on the linear layers named by
    ``lora_targets`` (none: peft's choice for the architecture)."""

    config: str = ""
    pretrained: str = ""
    max_seq_len: int = 0
    vocab_size: int = 0
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=list)

    @staticmethod
    def check_run(config: dict[str, Any]) -> None:
        """LoRA runs under ``parallel=single`` or ``ddp`` (and needs peft installed)."""
        from xirang_hf.lora import STRATEGIES

        if not config["model"].get("lora_rank"):
            return
        strategy = config["parallel"]["name"]
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"model.lora_rank with parallel={strategy}: LoRA runs under "
                f"parallel={' or parallel='.join(STRATEGIES)}"
            )
        try:
            import peft  # noqa: F401
        except ImportError:
            raise ConfigError("model.lora_rank needs peft: pip install 'xirang[lora]'") from None

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """Before any worker starts: the config must build a causal LM in transformers (tried
        on the meta device, so no memory is spent), and the zeros are replaced by the config's
        values so the planner, the data and the workers see real sizes."""
        import torch
        from transformers import AutoModelForCausalLM

        from xirang_hf.source import config_path, first_line, load_config

        _check_lora(settings)
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


def _check_lora(settings: dict[str, Any]) -> None:
    """``model.lora_*`` in range, and LoRA only over pretrained weights."""
    rank, alpha, dropout = settings["lora_rank"], settings["lora_alpha"], settings["lora_dropout"]
    if rank < 0 or alpha <= 0 or not 0 <= dropout < 1:
        raise ConfigError(
            f"model.lora_rank={rank}, lora_alpha={alpha}, lora_dropout={dropout}: the rank is "
            "0 (off) or more, alpha above 0 and the dropout in [0, 1)"
        )
    if rank and not settings["pretrained"]:
        raise ConfigError(
            "model.lora_rank: LoRA trains adapters over pretrained weights; set "
            "model.pretrained=<folder with config.json and *.safetensors>"
        )
