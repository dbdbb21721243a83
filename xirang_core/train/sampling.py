"""Top-k sampling from any model that maps token ids to logits: the end-of-run sample.

Shared by the model families so that every one samples the same way (and the same seed gives
the same continuation for the same logits)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F


@torch.no_grad()
def sample(
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    idx: torch.Tensor,
    new_tokens: int,
    context: int,
    temperature: float = 0.8,
    top_k: int = 40,
) -> torch.Tensor:
    """``idx`` (batch, seq) with ``new_tokens`` tokens appended, each drawn from the softmax of
    the last position's logits over at most the ``context`` latest tokens, keeping the
    ``top_k`` most likely (0 = all)."""
    for _ in range(new_tokens):
        logits = logits_of(idx[:, -context:])[:, -1, :] / max(temperature, 1e-5)
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1, None]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
    return idx
