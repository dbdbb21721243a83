"""Map a xirang plan onto a Colossal-AI Booster plugin and train through the Booster.

``plugin`` picks the Booster plugin; the plan's numbers go where that plugin takes them:

- torch_ddp: plain data parallel (runs on CPU with gloo);
- low_level_zero: ZeRO stage ``zero`` (1 or 2) over the data-parallel group (GPU only);
- gemini: ZeRO-3 with chunked parameter management (GPU only);
- hybrid_parallel: ``tp`` x ``pp`` x data parallel with ``zero`` and the step's micro-batches
  (GPU only).

The ZeRO and hybrid plugins keep gradients in the optimizer's partitions, so the Booster owns
backward (``booster.backward`` scales and reduces), clipping (``trainer.grad_clip`` is the
plugin's ``max_norm``: its optimizer measures and clips the norm inside its step, where the
gradients are) and, with ``pp > 1``, the whole step (``booster.execute_pipeline``). The
strategy's :meth:`~ColossalStrategy.runner` hands these to the loop (``backward``, ``clip``,
``step``, ``evaluate``), as a native pipeline's runner has ``step``; TorchDDP trains through
the plain loop. ``hybrid_parallel`` shards a Llama-shaped model with Colossal-AI's own ShardFormer
policy (``shard.py``). Gemini's default ``precision: fp32`` becomes bf16 (it has no fp32).

The Booster needs the optimizer together with the model, so this strategy builds xirang's
optimizer itself and hands the boosted one to the worker (``optimizer`` attribute).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from xirang import ConfigError
from xirang.specs import StepRunner, StrategyBase
from xirang_colossalai.settings import GPU_ONLY, ColossalConfig, check_plugin


class ColossalStrategy(StrategyBase):
    def __init__(self, **settings: Any) -> None:
        self.config = ColossalConfig(**settings)
        check_plugin(self.config.plugin)
        self.booster: Any = None
        self.optimizer: Any = None
        self.model: Any = None
        #: hybrid_parallel trains a stand-in (the Llama's Hugging Face twin): the worker
        #: evaluates and samples it, on every worker together (its shards span the workers)
        self.trained: nn.Module | None = None
        self.splits_model = self.config.plugin == "hybrid_parallel"
        self.micro_batches = 1  # per schedule run under pp > 1 (set when the model is wrapped)

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        require_device(self.config, ctx.device)
        config = with_precision(self.config, ctx.device)
        from colossalai.booster import Booster

        from xirang.parallel import build_optimizer

        target = model
        if config.plugin == "hybrid_parallel":  # ShardFormer shards the Hugging Face Llama
            from xirang_colossalai.shard import hf_llama

            model = hf_llama(model, ctx.config)
            target = model.get_submodule("hf")  # transformers' model, which ShardFormer shards
        max_norm = max(0.0, float(ctx.config["trainer"].get("grad_clip", 0.0)))
        self.micro_batches = config.micro_batches or step_micro_batches(ctx)
        plugin = booster_plugin(config, self.micro_batches, max_norm)
        self.booster = Booster(plugin=plugin)
        optimizer = build_optimizer(target, ctx.config["optim"])
        self.model, self.optimizer, *_ = self.booster.boost(target, optimizer)
        wrapped = self.model
        if target is not model:
            model.hf = self.model  # the wrapper's forward (logits, loss) runs the sharded model
            wrapped = self.trained = model
        if config.plugin != "torch_ddp" and self.booster.plugin.support_no_sync():
            wrapped.no_sync = lambda: self.booster.no_sync(self.model, self.optimizer)
        return wrapped

    def runner(self, wrapped: nn.Module) -> StepRunner:
        """The Booster's backward and clipping (and with ``pp > 1`` its pipeline's whole step
        and evaluation) for the loop; TorchDDP trains through the loop's own."""
        if self.config.plugin == "torch_ddp":
            return StepRunner()
        if self.config.pp > 1:
            step, evaluate = self.pipeline_step, self.pipeline_eval
            return StepRunner(step, evaluate, self.backward, clipped_in_step)
        return StepRunner(backward=self.backward, clip=clipped_in_step)

    def backward(self, loss: torch.Tensor) -> None:
        self.booster.backward(loss, self.optimizer)

    def get_state_dict(self, model: nn.Module, optimizer: Any) -> tuple[dict, dict]:
        """The checkpoint's model and optimizer state (xirang's checkpoint manager asks the
        strategy): TorchDDP's through torch's own state dict of what Colossal-AI wraps, so
        its checkpoints are plain ones another strategy resumes."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        return get_state_dict(*self._torch_parts(model, optimizer))

    def set_state_dict(
        self, model: nn.Module, optimizer: Any, model_sd: dict, optim_sd: dict
    ) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        model, optimizer = self._torch_parts(model, optimizer)
        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)

    def _torch_parts(self, model: Any, optimizer: Any) -> tuple[nn.Module, Any]:
        """TorchDDP's torch model and optimizer inside the Booster's wrappers (which torch's
        state dict cannot iterate); the other plugins' wrappers as they are: their state is
        partitioned in ways torch's state dict does not know (not run here: GPU only)."""
        if self.config.plugin != "torch_ddp":
            return model, optimizer
        inner = model.unwrap() if hasattr(model, "unwrap") else model
        return inner, optimizer.unwrap()

    def pipeline_step(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Forward and backward of the step's micro-batches through Colossal-AI's schedule;
        the mean loss on the last stage, zero elsewhere (as the native pipeline returns)."""
        loss = self._run_pipeline(batches, self.optimizer)
        return loss.detach() if loss is not None else torch.zeros((), device=self._device())

    @torch.no_grad()
    def pipeline_eval(self, batches: Any, n_batches: int) -> float:
        """Mean held-out loss over ``n_batches`` forward-only schedule runs of a step's
        micro-batches (without an optimizer Colossal-AI's schedule runs forwards only). The
        last stage holds each loss: a sum over every worker, with the number of holders, gives
        all of them the same mean."""
        held = torch.zeros(2, device=self._device())  # loss sum, number of losses
        per_run = self.micro_batches
        for i in range(n_batches):
            loss = self._run_pipeline([batches.get(i * per_run + j) for j in range(per_run)])
            if loss is not None:
                held += torch.stack([loss.float(), torch.ones_like(held[0])])
        if torch.distributed.is_initialized():
            torch.distributed.all_reduce(held)
        return (held[0] / held[1].clamp(min=1)).item()

    def _run_pipeline(
        self, batches: list[tuple[torch.Tensor, torch.Tensor]], optimizer: Any = None
    ) -> torch.Tensor | None:
        """One schedule run over ``batches``; the loss on the last stage (None elsewhere). The
        sharded model is transformers' Llama, scored on :func:`hf_labels`."""
        device = self._device()
        idx = torch.cat([b[0] for b in batches]).to(device)
        targets = torch.cat([b[1] for b in batches]).to(device)
        out = self.booster.execute_pipeline(
            iter([{"input_ids": idx, "labels": hf_labels(targets)}]),
            self.model,
            _model_loss,
            optimizer,
            return_loss=True,
        )
        return out.get("loss")

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device


def hf_labels(targets: torch.Tensor) -> torch.Tensor:
    """xirang's targets as transformers' Llama ``labels`` (which it shifts itself): label t+1
    is target t, so each row's last target is not scored."""
    return torch.cat([torch.full_like(targets[:, :1], -100), targets[:, :-1]], dim=1)


def _model_loss(outputs: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' Llama returns its loss when given labels."""
    return outputs.loss


def clipped_in_step(max_norm: float) -> None:
    """The loop's clip under a Booster optimizer: the plugin was given ``max_norm`` and clips
    inside its step, where the partitioned gradients are; no norm exists before it."""
    return None


def with_precision(config: ColossalConfig, device: Any) -> ColossalConfig:
    """Gemini computes in fp16 or bf16 only (Colossal-AI asserts on fp32): the default fp32
    becomes bf16 where the device has it, and is refused where it does not."""
    if config.plugin != "gemini" or config.precision != "fp32":
        return config
    if not bf16_supported(device):
        raise ConfigError(
            "parallel.precision=fp32: parallel.plugin=gemini trains in fp16 or bf16 only, and "
            "this device has no bf16; set parallel.precision=fp16, or use parallel.plugin="
            "low_level_zero (which takes fp32)"
        )
    return replace(config, precision="bf16")


def bf16_supported(device: Any) -> bool:
    kind = getattr(device, "type", str(device))
    module = getattr(torch, kind, None)
    check = getattr(module, "is_bf16_supported", None)
    return bool(check()) if check is not None else False


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


def booster_plugin(config: ColossalConfig, step_micro: int = 1, max_norm: float = 0.0) -> Any:
    """The Booster plugin object for ``config`` (imports Colossal-AI); ``max_norm`` is
    ``trainer.grad_clip`` (0 = no clipping)."""
    from colossalai.booster import plugin

    if config.plugin == "torch_ddp":
        return plugin.TorchDDPPlugin()
    if config.plugin == "low_level_zero":
        if config.zero not in (1, 2):
            raise ConfigError(f"parallel.zero={config.zero}: low_level_zero takes 1 or 2")
        return plugin.LowLevelZeroPlugin(
            stage=config.zero, precision=config.precision, max_norm=max_norm
        )
    if config.plugin == "gemini":
        return plugin.GeminiPlugin(precision=config.precision, max_norm=max_norm)
    from xirang_colossalai.shard import llama_policy

    return plugin.HybridParallelPlugin(
        tp_size=config.tp,
        pp_size=config.pp,
        zero_stage=config.zero,
        num_microbatches=step_micro if config.pp > 1 else None,
        precision=config.precision,
        max_norm=max_norm,
        custom_policy=llama_policy(),
        parallel_output=False,  # whole-vocabulary logits for the model's own cross-entropy
    )
