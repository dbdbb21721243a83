"""Weights & Biases (``tracker=wandb``): the resolved config, every logged figure per step
and the summary; offline files in the run directory unless the user has logged in."""

from typing import Any

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec

NAME = "wandb"


@hookimpl
def xirang_trackers() -> list[TrackerSpec]:
    return [
        TrackerSpec(
            name=NAME,
            target="xirang_wandb.tracker:WandbTracker",
            schema="xirang_wandb.tracker:WandbConfig",
            requires=("wandb",),
            install="pip install 'xirang[wandb]'",
            description="W&B run, offline in <run dir>/wandb unless logged in (wandb login)",
        )
    ]


@hookimpl
def xirang_on_run_start(ctx: Any, config: Any) -> None:
    from xirang_core import tracking

    tracking.on_run_start(NAME, ctx, config)


@hookimpl
def xirang_on_step_end(ctx: Any, step: int, metrics: dict[str, Any]) -> None:
    from xirang_core import tracking

    tracking.on_step_end(NAME, ctx, step, metrics)


@hookimpl
def xirang_on_fault(ctx: Any, error: BaseException) -> None:
    from xirang_core import tracking

    tracking.on_fault(NAME, ctx, error)


@hookimpl
def xirang_on_run_end(ctx: Any, summary: dict[str, Any]) -> None:
    from xirang_core import tracking

    tracking.on_run_end(NAME, ctx, summary)


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
