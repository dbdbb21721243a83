"""AdamW and SGD as :class:`xirang.specs.Optimizer` factories."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def adamw(
    groups: list[dict[str, Any]], optim: Mapping[str, Any], impl: Mapping[str, bool]
) -> torch.optim.Optimizer:
    return torch.optim.AdamW(groups, lr=optim["lr"], betas=(optim["beta1"], optim["beta2"]), **impl)


def sgd(
    groups: list[dict[str, Any]], optim: Mapping[str, Any], impl: Mapping[str, bool]
) -> torch.optim.Optimizer:
    return torch.optim.SGD(groups, lr=optim["lr"], momentum=optim["beta1"], **impl)
