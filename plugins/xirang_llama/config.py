"""The Llama family's settings (``model.*``) apart from the model: checking a run's config
imports no torch, and a shape that cannot build a model is refused when it is composed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xirang import ConfigError
from xirang.lora import LoraSettings, check_run, check_settings, check_targets

#: the linear layers of a Llama, by the last part of their names (LoRA targets)
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
#: LoRA's targets when ``model.lora_targets`` names none: peft's own for a Llama
LORA_TARGETS = ["q_proj", "v_proj"]


@dataclass
class LlamaConfig(LoraSettings):
    """A Llama's shape and where its weights start; ``lora_*``: LoRA adapters over the
    pretrained weights (:class:`xirang.lora.LoraSettings`; q and v projections unless
    ``lora_targets`` names others)."""

    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 384
    #: 0: the tokenizer's vocabulary (resolved before any worker starts)
    vocab_size: int = 0
    max_seq_len: int = 256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    #: RoPE frequency scaling as transformers names it: {} for none, or Llama 3.1's
    #: {rope_type: llama3, factor, low_freq_factor, high_freq_factor,
    #: original_max_position_embeddings}
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    #: a Hugging Face Llama directory to start from (xirang ckpt export --format hf)
    pretrained: str = ""

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def check(self) -> None:
        """Raise ValueError naming the setting that cannot build a model."""
        if self.vocab_size < 1:
            raise ValueError(
                f"vocab_size={self.vocab_size}: must be at least 1; 0 takes the tokenizer's "
                "vocabulary, which is not known here (give the model option a vocab_size, or "
                "model.vocab_size=<n> on a run)"
            )
        self.check_shape()

    def check_shape(self) -> None:
        """:meth:`check` without the vocabulary, which a run settles after composing (0 is
        the tokenizer's)."""
        if self.n_heads < 1 or self.dim % self.n_heads:
            raise ValueError(f"dim={self.dim} must be a multiple of n_heads={self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} (dim / n_heads) must be even for RoPE")
        if self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} (grouped "
                "queries share a key/value head)"
            )
        if self.rope_scaling:
            check_rope_scaling(self.rope_scaling)
        if min(self.dim, self.ffn_dim, self.max_seq_len) < 1 or self.n_layers < 0:
            raise ValueError("dim, ffn_dim and max_seq_len must be >= 1, n_layers >= 0")

    #: LoRA runs under parallel=single or ddp, with peft installed
    check_run = staticmethod(check_run)

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``model`` section, refused here rather than in a worker."""
        try:
            LlamaConfig(**settings).check_shape()
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None
        check_settings(settings)
        # a head tied to the token embedding is not a target: a merge into it would change
        # the embedding too
        linear = [n for n in LINEAR if not (n == "lm_head" and settings["tie_embeddings"])]
        check_targets(list(settings["lora_targets"]), linear, "the Llama")
        return settings


#: the keys of Llama 3.1's RoPE scaling (``rope_type: llama3``)
LLAMA3_SCALING = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


def check_rope_scaling(scaling: dict[str, Any]) -> None:
    """Raise ValueError unless ``scaling`` is a RoPE scaling this model computes."""
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling: rope_type={kind!r}; computed here: 'llama3' (or {{}})")
    missing = [k for k in LLAMA3_SCALING if k not in scaling]
    if missing:
        raise ValueError(f"rope_scaling: rope_type 'llama3' needs {', '.join(missing)}")
