"""MLflow (``tracker=mlflow``): a run per training run, its resolved config as parameters,
every logged figure per step, and the summary, loss curve and config as artifacts."""

from typing import Any

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec

NAME = "mlflow"


@hookimpl
def xirang_trackers() -> list[TrackerSpec]:
    return [
        TrackerSpec(
            name=NAME,
            target="xirang_mlflow.tracker:MlflowTracker",
            schema="xirang_mlflow.tracker:MlflowConfig",
            requires=("mlflow",),
            install="pip install 'xirang[mlflow]'",
            description="MLflow run: params, step metrics, artifacts (local SQLite or a server)",
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
