"""TensorBoard (``tracker=tensorboard``): every logged figure as a scalar in event files under
the run directory; ``tensorboard --logdir <run dir>`` shows them (and the profiler's trace)."""

from typing import Any

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec

NAME = "tensorboard"


@hookimpl
def xirang_trackers() -> list[TrackerSpec]:
    return [
        TrackerSpec(
            name=NAME,
            target="xirang_tensorboard.tracker:TensorBoardTracker",
            schema="xirang_tensorboard.tracker:TensorBoardConfig",
            requires=("tensorboard",),
            install="pip install 'xirang[tensorboard]'",
            description="scalars per logged step in <run dir>/tensorboard (event files)",
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
