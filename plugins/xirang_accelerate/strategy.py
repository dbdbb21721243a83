"""Wrap xirang's model through an ``Accelerator``.

The worker has already opened the process group, and Accelerate's state adopts it (it reads the
same RANK/WORLD_SIZE environment), so xirang keeps owning launch, data and the loop; Accelerate
only decides how the model is wrapped: ``mode=ddp`` (DistributedDataParallel) or ``mode=fsdp``
(FSDP2 ``fully_shard`` per transformer block, parameters resharded after forward when
``reshard_after_forward``).
"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist
from torch import nn

from xirang import ConfigError
from xirang.specs import StrategyBase
from xirang_accelerate.settings import AccelerateConfig


class AccelerateStrategy(StrategyBase):
    def __init__(self, **settings: Any) -> None:
        self.config = AccelerateConfig(**settings)
        self.accelerator: Any = None

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        from accelerate import Accelerator

        if dist.is_initialized():
            # Accelerate insists on the rendezvous variables even when it adopts an open group
            # (xirang's launcher may have rendezvoused by other means); they are not used then
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "0")
        kwargs: dict[str, Any] = {"cpu": ctx.device.type == "cpu"}
        if self.config.mode == "fsdp":
            kwargs["fsdp_plugin"] = self._fsdp_plugin(model)
        self.accelerator = Accelerator(**kwargs)
        kind = str(self.accelerator.distributed_type)
        if self.config.mode == "fsdp" and "FSDP" not in kind:
            raise ConfigError(
                f"parallel=accelerate mode=fsdp: Accelerate set up {kind} here, not FSDP (it "
                f"shards only on accelerators). Use mode=ddp, or parallel=fsdp on this device."
            )
        return self.accelerator.prepare_model(model)

    def _fsdp_plugin(self, model: nn.Module) -> Any:
        from accelerate.utils import FullyShardedDataParallelPlugin

        blocks = {type(m).__name__ for m in _layers(model)}
        return FullyShardedDataParallelPlugin(
            fsdp_version=2,
            reshard_after_forward=self.config.reshard_after_forward,
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=sorted(blocks),
        )


def _layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks (FSDP's units): the model's ``blocks`` container when it has one."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleDict):
        return list(blocks.values())
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    return []
