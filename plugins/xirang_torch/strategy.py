"""One strategy over a device mesh for every native split: fsdp, tp, sp, pp and their hybrids.

The named options (``parallel=fsdp|tp|sp|pp|hybrid``) are presets of :class:`MeshConfig`; the
model family's own ``parallelize`` object says how its layers split. Order of application is
the one that composes: pipeline split, tensor/sequence parallel, recompute, ``torch.compile``
per block (``trainer.compile``), then data parallel.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import nn

from xirang.parallel import (
    ParallelPlan,
    check_plan,
    compile_model,
    fsdp_policy,
    resolve_degrees,
)
from xirang.specs import StepRunner, StrategyBase
from xirang_torch import recompute, sharding
from xirang_torch.mesh import build_mesh, coordinate, degree
from xirang_torch.settings import AUTO, MeshConfig
from xirang_torch.stages import auto_split


class MeshStrategy(StrategyBase):
    compiles = True  # trainer.compile: blocks compiled after recompute, before data parallel

    def __init__(self, **settings: Any) -> None:
        self.config = MeshConfig(**settings)
        self._runners: dict[int, StepRunner] = {}  # per wrapped module: a pipeline's schedule

    def plan(self, world: int, micro_batch: int) -> ParallelPlan:
        """The plan's degrees. Selective recompute is planned as none: the planner's memory
        model knows none and full, and none over-estimates what selective keeps."""
        c = self.config
        dp, tp, pp = resolve_degrees(c.dp, c.tp, c.pp, world)
        planned = "full" if c.recompute == "full" else "none"
        # auto: balanced until the workers have measured their devices (wrap)
        stage_layers = () if c.stage_layers == AUTO else tuple(c.stage_layers or ())
        return ParallelPlan(
            dp, tp, pp, c.sp, c.zero, micro_batch, planned, c.schedule, stage_layers
        )

    def shards_parameters(self, ctx: Any) -> bool:
        """Whether :meth:`wrap` shards parameters over data parallel (FSDP2, zero >= 1): the
        worker then builds the model on the meta device and materialises it once wrapped."""
        return _shards(self.plan(ctx.world_size, ctx.config["trainer"]["micro_batch"]))

    def build_mesh(self, ctx: Any) -> Any:
        """The (pp, dp, tp) mesh; the worker puts it in the context before wrapping."""
        plan = self.plan(ctx.world_size, ctx.config["trainer"]["micro_batch"])
        return build_mesh(ctx.device.type, plan.dp, plan.tp, plan.pp)

    def wrap(self, model: nn.Module, ctx: Any) -> nn.Module:
        from xirang import get_registry

        trainer = ctx.config["trainer"]
        plan = self.plan(ctx.world_size, trainer["micro_batch"])
        spec = get_registry().spec("model", ctx.config["model"]["family"])
        fns = _parallelize(spec)
        settings = {k: v for k, v in ctx.config["model"].items() if k not in ("family", "name")}
        shape = fns.shape(settings, ctx.config["data"]["seq_len"])
        mesh = ctx.mesh
        if plan.pp > 1 and self.config.stage_layers == AUTO:
            plan = replace(plan, stage_layers=auto_split(model, ctx, plan, shape))
            self.config.stage_layers = list(plan.stage_layers)
        check_plan(plan, shape, trainer["global_batch"])
        if plan.pp > 1:
            _split_stage(fns, model, coordinate(mesh, "pp"), plan)
        if plan.tp > 1:
            fns.apply_tp(model, mesh["tp"], plan.sp)
        recompute.checkpoint_layers(
            fns.layers(model), self.config.recompute, self.config.recompute_every
        )
        compile_model(model, ctx.config)
        precision = trainer.get("precision", "fp32")
        balanced = self.config.balance != "uniform"
        wrapped = self._data_parallel(model, fns, mesh, plan, precision, balanced)
        if plan.pp > 1:
            runner = self._pipeline(wrapped, model, fns, ctx, plan, shape.layers)
            self._runners[id(wrapped)] = runner
        return wrapped

    def runner(self, wrapped: nn.Module) -> StepRunner:
        """A pipeline's whole step and evaluation run through its schedule; else the loop's."""
        return self._runners.get(id(wrapped), StepRunner())

    @staticmethod
    def _data_parallel(
        model: nn.Module,
        fns: Any,
        mesh: Any,
        plan: ParallelPlan,
        precision: str,
        balanced: bool = False,
    ) -> nn.Module:
        if not _shards(plan):
            if degree(mesh, "dp") == 1:
                return model
            return sharding.replicate_model(model, mesh["dp"], plan.pp > 1, balanced)
        policy = fsdp_policy(precision)
        layers = fns.layers(model)
        ends = fns.fsdp_units(model)  # embeddings and head apart, if the family names them
        return sharding.shard_model(model, layers, mesh["dp"], plan.zero, policy, balanced, ends)

    @staticmethod
    def _pipeline(
        wrapped: nn.Module, model: nn.Module, fns: Any, ctx: Any, plan: ParallelPlan, layers: int
    ) -> StepRunner:
        from xirang_torch.pipeline import PipelineRunner

        trainer = ctx.config["trainer"]
        runner = PipelineRunner(
            wrapped,
            ctx.mesh,
            ctx.device,
            plan.schedule,
            plan.micro_batches(trainer["global_batch"]),
        )
        runner.tie(fns.tied(model))
        runner.layers = list(plan.layer_counts(layers))
        return StepRunner(step=runner.step, evaluate=runner.evaluate, figures=runner.figures)


def _split_stage(fns: Any, model: nn.Module, stage: int, plan: ParallelPlan) -> None:
    """Keep this rank's pipeline stage: its given layer range under ``parallel.stage_layers``
    (checked at compose against the model's layers), else the family's balanced split."""
    if not plan.stage_layers:
        fns.split_stage(model, stage, plan.pp)
        return
    bounds = plan.stage_range(stage, len(fns.layers(model)))
    fns.split_stage(model, stage, plan.pp, bounds=bounds)


def _shards(plan: ParallelPlan) -> bool:
    """Whether data parallel is sharded with FSDP2: zero >= 1 over several ranks, and also on
    one rank when nothing else splits the model, so a one-device ``parallel=fsdp`` run holds
    DTensor parameters, the mixed-precision policy and a sharded checkpoint as at scale."""
    if plan.zero < 1:
        return False
    return plan.dp > 1 or (plan.tp == 1 and plan.pp == 1)


def _parallelize(spec: Any) -> Any:
    from xirang import ConfigError

    target = spec.parallelize
    if not target:
        raise ConfigError(
            f"model family '{spec.name}' declares no parallelize plan, so it can only run with "
            f"parallel=single or parallel=ddp"
        )
    return spec.load_parallelize()
