"""The bigram model: each position predicts the next token from its own token only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from xirang.model import init_parameters, sample


@dataclass
class BigramConfig:
    dim: int = 32
    vocab_size: int = 0


class Bigram(nn.Module):
    """Token embedding, one tanh layer, an untied head: the :class:`xirang.specs.Model`
    protocol in its smallest form (no layers to split, so ``parallel=single`` or ``ddp``)."""

    def __init__(self, config: BigramConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.hidden = nn.Linear(config.dim, config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size)
        init_parameters(self)  # per-name generators: the same weights however it is built

    @classmethod
    def from_config(cls, settings: dict[str, Any]) -> Bigram:
        return cls(BigramConfig(**settings))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.head(torch.tanh(self.hidden(self.embed(idx))))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        if name.endswith("bias"):
            tensor.zero_()
        else:
            tensor.normal_(0.0, 0.02, generator=generator)

    def num_params(self, non_embedding: bool = True) -> int:
        total = sum(p.numel() for p in self.parameters())
        return total - self.embed.weight.numel() if non_embedding else total

    def flops_per_token(self, seq_len: int) -> float:
        return 6.0 * self.num_params()  # no attention: nothing grows with seq_len

    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, top_k: int = 40
    ) -> torch.Tensor:
        return sample(self, idx, new_tokens, context=1, temperature=temperature, top_k=top_k)
