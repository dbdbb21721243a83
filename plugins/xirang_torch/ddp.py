"""Data parallel through torch's DistributedDataParallel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from xirang.parallel import check_balance, compile_model
from xirang.specs import StrategyBase


@dataclass
class DDPConfig:
    bucket_cap_mb: int = 25
    static_graph: bool = False
    balance: str = "uniform"  # uniform | calibrated | adaptive (xirang_core.train.balance)
    balance_every: int = 10  # adaptive: steps between moves of the shares
    balance_shares: list[int] = field(default_factory=list)  # fixed micro-batches per rank

    @staticmethod
    def check(data: dict[str, Any]) -> None:
        """``parallel.balance*``: checked at compose for the run's workers."""
        from xirang.launch import run_workers

        check_balance(data, run_workers(data)[0])


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
