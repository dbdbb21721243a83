"""TensorBoard (``tracker=tensorboard``): every logged figure as a scalar in event files under
the run directory; ``tensorboard --logdir <run dir>`` shows them (and the profiler's trace)."""

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec
from xirang.tracking import run_event_hooks

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


# the run events go to the core's tracking layer, as every tracker's do
xirang_on_run_start, xirang_on_step_end, xirang_on_fault, xirang_on_run_end = run_event_hooks(NAME)


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
