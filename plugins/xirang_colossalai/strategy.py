"""Map a xirang plan onto a Colossal-AI Booster plugin and train through the Booster.

``plugin`` picks the Booster plugin; the plan's numbers go where that plugin takes them:

- torch_ddp: plain data parallel (runs on CPU with gloo);
- low_level_zero: ZeRO stage ``zero`` (1 or 2) over the data-parallel group (GPU only);
- gemini: ZeRO-3 with chunked parameter management (GPU only);
- hybrid_parallel: ``tp`` x ``pp`` x data parallel with ``zero`` and the step's micro-batches
  (GPU only).

The ZeRO and hybrid plugins keep gradients in the optimizer's partitions, so the Booster owns
backward (``booster.backward`` scales and reduces), clipping (``clip_grad_by_norm``) and, with
``pp > 1``, the whole step (``booster.execute_pipeline``). The boosted model carries the loop's
hooks for these (``xirang_backward``, ``xirang_clip``, ``xirang_step``), as a native pipeline
carries ``xirang_step``; TorchDDP trains through the plain loop.

The Booster needs the optimizer together with the model, so this strategy builds xirang's
optimizer itself and hands the boosted one to the worker (``optimizer`` attribute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
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
    #: micro-batches per step under pp > 1; 0 = the step's own (global batch / (dp x micro))
    micro_batches: int = 0
    precision: str = "fp32"


class ColossalStrategy:
    def __init__(self, **settings: Any) -> None:
        self.config = ColossalConfig(**settings)
        if self.config.plugin not in PLUGINS:
            raise ConfigError(f"parallel.plugin={self.config.plugin!r}: valid plugins {PLUGINS}")
        self.booster: Any = None
        self.optimizer: Any = None
        self.model: Any = None

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        require_device(self.config, ctx.device)
        from colossalai.booster import Booster

        from xirang_core.train.optim import build_optimizer

        self.booster = Booster(plugin=booster_plugin(self.config, step_micro_batches(ctx)))
        optimizer = build_optimizer(model, ctx.config["optim"])
        self.model, self.optimizer, *_ = self.booster.boost(model, optimizer)
        if self.config.plugin != "torch_ddp":
            self._own_the_step(self.model)
        return self.model

    def _own_the_step(self, boosted: nn.Module) -> None:
        """Hand the loop the Booster's backward, clipping, no-sync and pipeline step."""
        boosted.xirang_backward = self.backward
        boosted.xirang_clip = self.optimizer.clip_grad_by_norm
        if self.booster.plugin.support_no_sync():
            boosted.no_sync = lambda: self.booster.no_sync(boosted, self.optimizer)
        if self.config.pp > 1:
            boosted.xirang_step = self.pipeline_step

    def backward(self, loss: torch.Tensor) -> None:
        self.booster.backward(loss, self.optimizer)

    def pipeline_step(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Forward and backward of the step's micro-batches through Colossal-AI's schedule;
        the mean loss on the last stage, zero elsewhere (as the native pipeline returns)."""
        device = next(self.model.parameters()).device
        batch = {
            "idx": torch.cat([b[0] for b in batches]).to(device),
            "targets": torch.cat([b[1] for b in batches]).to(device),
        }
        out = self.booster.execute_pipeline(
            iter([batch]), self.model, _model_loss, self.optimizer, return_loss=True
        )
        loss = out.get("loss")
        return loss.detach() if loss is not None else torch.zeros((), device=device)


def _model_loss(outputs: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model returns its loss when given targets (xirang's model contract)."""
    return outputs


def require_device(config: ColossalConfig, device: Any) -> None:
    """Refuse, before anything is built, a plugin that cannot run on ``device``."""
    if config.plugin in GPU_ONLY and getattr(device, "type", str(device)) == "cpu":
        raise ConfigError(
            f"parallel.plugin={config.plugin} needs a GPU: Colossal-AI 0.5 allocates its ZeRO "
            f"and hybrid-parallel state on a CUDA device (on CPU it stops with 'device is "
            f"required' or an RNG-state error). Run it with device=cuda on a machine with a "
            f"GPU per worker and colossalai installed (docs/parallel.md); on CPU use "
            f"parallel.plugin=torch_ddp or the native parallel=fsdp|tp|pp|hybrid"
        )


def step_micro_batches(ctx: Any) -> int:
    """Micro-batches of one data-parallel rank per step under the run's trainer settings."""
    trainer = ctx.config["trainer"]
    plugin = ctx.config["parallel"]
    replicas = ctx.world_size // max(1, plugin.get("tp", 1) * plugin.get("pp", 1))
    return max(1, trainer["global_batch"] // (max(1, replicas) * trainer["micro_batch"]))


def booster_plugin(config: ColossalConfig, step_micro: int = 1) -> Any:
    """The Booster plugin object for ``config`` (imports Colossal-AI)."""
    from colossalai.booster import plugin

    if config.plugin == "torch_ddp":
        return plugin.TorchDDPPlugin()
    if config.plugin == "low_level_zero":
        if config.zero not in (1, 2):
            raise ConfigError(f"parallel.zero={config.zero}: low_level_zero takes 1 or 2")
        return plugin.LowLevelZeroPlugin(stage=config.zero, precision=config.precision)
    if config.plugin == "gemini":
        return plugin.GeminiPlugin(precision=config.precision)
    return plugin.HybridParallelPlugin(
        tp_size=config.tp,
        pp_size=config.pp,
        zero_stage=config.zero,
        num_microbatches=(config.micro_batches or step_micro) if config.pp > 1 else None,
        precision=config.precision,
    )
