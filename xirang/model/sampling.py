"""Autoregressive sampling, shared by every model family's ``generate``."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


@torch.no_grad()
def sample(
    model: nn.Module,
    idx: torch.Tensor,
    new_tokens: int,
    context: int,
    temperature: float = 0.8,
    top_k: int = 40,
) -> torch.Tensor:
    """``idx`` (batch, seq) with ``new_tokens`` tokens appended, each drawn from the model's
    next-token distribution over the last ``context`` tokens, sharpened by ``temperature`` and
    cut to the ``top_k`` likeliest (0: all)."""
    for _ in range(new_tokens):
        logits = model(idx[:, -context:])[:, -1, :] / max(temperature, 1e-5)
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
    return idx
