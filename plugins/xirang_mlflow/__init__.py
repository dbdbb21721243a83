"""MLflow (``tracker=mlflow``): a run per training run, its resolved config as parameters,
every logged figure per step, and the summary, loss curve and config as artifacts."""

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec
from xirang.tracking import run_event_hooks

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


# the run events go to the core's tracking layer, as every tracker's do
xirang_on_run_start, xirang_on_step_end, xirang_on_fault, xirang_on_run_end = run_event_hooks(NAME)


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
