"""The GPT family's settings (``model.*``), apart from the model: checking a run's config
imports no torch, and a setting that cannot build a model is refused when it is composed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang import ConfigError


@dataclass
class GPTConfig:
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    max_seq_len: int = 256
    vocab_size: int = 256  # a config's 0 means the tokenizer's, filled in when it is composed
    dropout: float = 0.0
    #: a Hugging Face GPT-2 directory to start from ("" = fresh init); see xirang_gpt.hf
    pretrained: str = ""

    def check(self) -> None:
        """Raise ValueError naming the setting that cannot build a model."""
        if self.n_head < 1 or self.n_embd < 1 or self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if self.max_seq_len < 1 or self.n_layer < 0 or self.vocab_size < 0:
            raise ValueError(
                "max_seq_len must be >= 1, n_layer >= 0 and vocab_size >= 0 (0: the tokenizer's)"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout={self.dropout}: must be in [0, 1)")

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``model`` section, refused here rather than in a worker."""
        try:
            GPTConfig(**settings).check()
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None
        return settings
