"""Data parallel through torch's DistributedDataParallel."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from xirang.parallel import compile_model
from xirang.specs import StrategyBase
from xirang_torch.settings import DDPConfig


class DistributedDataParallel(StrategyBase):
    compiles = True  # trainer.compile: blocks compiled before the DDP wrapper, as torchtitan does

    def __init__(self, **settings: Any) -> None:
        self.config = DDPConfig(**settings)

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        compile_model(model, ctx.config)
        device_ids = [ctx.device] if ctx.device.type not in ("cpu", "meta") else None
        return TorchDDP(
            model,
            device_ids=device_ids,
            bucket_cap_mb=self.config.bucket_cap_mb,
            static_graph=self.config.static_graph,
            # balanced ranks run unequal forwards: a buffer broadcast in each would not pair up
            broadcast_buffers=self.config.balance == "uniform",
        )
