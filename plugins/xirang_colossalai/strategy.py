"""Map a xirang plan onto a Colossal-AI Booster plugin and boost the model and optimizer.

``plugin`` picks the Booster plugin; the plan's numbers go where that plugin takes them:

- torch_ddp: plain data parallel (runs on CPU with gloo);
- low_level_zero: ZeRO stage ``zero`` (1 or 2) over the data-parallel group (GPU only);
- gemini: ZeRO-3 with chunked parameter management (GPU only);
- hybrid_parallel: ``tp`` x ``pp`` x data parallel with ``zero`` and ``micro_batches`` (GPU only).

Only torch_ddp trains today: the other three need ``booster.backward`` (and
``execute_pipeline``) in place of the loop's ``loss.backward()``, which is not wired yet, so
they are mapped (``booster_plugin``) but refused at wrap time with that reason.

The Booster needs the optimizer together with the model, so this strategy builds xirang's
optimizer itself and hands the boosted one to the worker (``optimizer`` attribute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from xirang_core.errors import ConfigError

PLUGINS = ("torch_ddp", "low_level_zero", "gemini", "hybrid_parallel")
GPU_ONLY = ("low_level_zero", "gemini", "hybrid_parallel")


@dataclass
class ColossalConfig:
    plugin: str = "torch_ddp"
    tp: int = 1
    pp: int = 1
    zero: int = 1
    micro_batches: int = 1
    precision: str = "fp32"


class ColossalStrategy:
    def __init__(self, **settings: Any) -> None:
        self.config = ColossalConfig(**settings)
        if self.config.plugin not in PLUGINS:
            raise ConfigError(f"parallel.plugin={self.config.plugin!r}: valid plugins {PLUGINS}")
        self.booster: Any = None
        self.optimizer: Any = None

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        if self.config.plugin in GPU_ONLY and ctx.device.type == "cpu":
            raise ConfigError(
                f"parallel.plugin={self.config.plugin} needs a GPU in Colossal-AI 0.5; on CPU "
                f"use parallel.plugin=torch_ddp or a native strategy (parallel=fsdp|tp|pp)"
            )
        if self.config.plugin in GPU_ONLY:
            # these train only through booster.backward / execute_pipeline, which xirang's
            # loop does not drive yet: refusing beats training with gradients left unreduced
            raise ConfigError(
                f"parallel.plugin={self.config.plugin}: xirang's loop does not yet drive "
                f"Colossal-AI's booster.backward; use parallel.plugin=torch_ddp, or the native "
                f"parallel=fsdp|tp|pp|hybrid"
            )
        from colossalai.booster import Booster

        from xirang_core.train.optim import build_optimizer

        self.booster = Booster(plugin=booster_plugin(self.config))
        optimizer = build_optimizer(model, ctx.config["optim"])
        boosted, self.optimizer, *_ = self.booster.boost(model, optimizer)
        return boosted


def booster_plugin(config: ColossalConfig) -> Any:
    """The Booster plugin object for ``config`` (imports Colossal-AI)."""
    from colossalai.booster import plugin

    if config.plugin == "torch_ddp":
        return plugin.TorchDDPPlugin()
    if config.plugin == "low_level_zero":
        return plugin.LowLevelZeroPlugin(stage=config.zero, precision=config.precision)
    if config.plugin == "gemini":
        return plugin.GeminiPlugin(precision=config.precision)
    return plugin.HybridParallelPlugin(
        tp_size=config.tp,
        pp_size=config.pp,
        zero_stage=config.zero,
        num_microbatches=config.micro_batches if config.pp > 1 else None,
        precision=config.precision,
    )
