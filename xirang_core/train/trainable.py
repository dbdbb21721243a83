"""What a run trains and the FLOPs it does: a LoRA or frozen-base run computes no weight
gradients for its frozen weights, so its MFU counts fewer FLOPs than 6N.

Per token, a weight of the model costs 2 FLOPs in the forward pass, 2 for the gradient of its
input and 2 for its own gradient (PaLM's 6N). A frozen weight skips the last: 4 FLOPs. Its
input gradient is still needed to reach the adapters below it, so it stays. The adapters are
trained weights of their own: 6 each. Attention's ``12·L·H·Q·T`` has no weights and stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import torch


class Trained(NamedTuple):
    """Parameters that train and all of them (peft's ``trainable / all``), and the training
    FLOPs per token actually done."""

    trainable: int
    total: int
    flops_per_token: float


def trained_flops(
    model: torch.nn.Module, base: Iterable[torch.nn.Parameter], counted: int, flops: float
) -> Trained:
    """``flops`` (the family's ``6N + 12·L·H·Q·T``, ``N`` = ``counted`` of the ``base``
    weights the model had before its adapters) less 2 per frozen counted weight, plus 6 per
    weight added since (the adapters): ``4·N_frozen + 6·N_trained + 12·L·H·Q·T``."""
    before = {id(p) for p in base}
    params = list(model.parameters())
    added = sum(p.numel() for p in params if id(p) not in before and p.requires_grad)
    frozen = sum(p.numel() for p in params if id(p) in before and not p.requires_grad)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    return Trained(trainable, total, flops - 2 * min(frozen, counted) + 6 * added)
