"""The whole model in one process."""

from __future__ import annotations

from typing import Any

from torch import nn

from xirang.parallel import compile_model
from xirang.specs import StrategyBase


class SingleProcess(StrategyBase):
    compiles = True  # trainer.compile: its blocks are compiled here

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        compile_model(model, ctx.config)
        return model
