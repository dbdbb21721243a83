"""The built-in planner behind ``parallel=auto`` (``parallel.planner=default``) and ``xirang
plan``, which shows its ranking: predicted memory and step time of every valid split, from the
model's shape and this host's measured devices or a described cluster. Registered through the
same hooks a third-party planner uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xirang import conf_folder, hookimpl
from xirang.specs import CommandSpec, PlannerSpec, RunConfig

if TYPE_CHECKING:  # the plan module imports torch; a plugin's __init__ loads at every start
    from xirang.model import ModelShape
    from xirang.parallel import ParallelPlan


@hookimpl
def xirang_planners() -> list[PlannerSpec]:
    return [
        PlannerSpec(
            name="default",
            target="xirang_planner.planner:DefaultPlanner",
            description="predicts memory and step time of every split; the fastest that fits",
        )
    ]


@hookimpl
def xirang_measure_plans(config: RunConfig, plans: list[ParallelPlan], steps: int) -> list[float]:
    """``parallel.smoke=true``: each plan trained ``steps`` steps by fresh workers of the run's
    device type, its median step time."""
    from xirang.planning import run_plans

    return [m.step_s for m in run_plans(config, plans, steps)]


@hookimpl
def xirang_stage_capacity(
    shape: ModelShape, plan: ParallelPlan, stage: int, memory_bytes: int
) -> int:
    """``parallel.stage_layers=auto``: the most layers a stage holds, by the memory model."""
    from xirang_planner.mixed import stage_capacity

    return stage_capacity(shape, plan, stage, memory_bytes)


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="plan",
            target="xirang_planner.command:main",
            description="rank the ways to split a model over a cluster (memory, step time)",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)  # conf/cluster: the clusters `xirang plan` describes
