"""Weights & Biases (``tracker=wandb``): the resolved config, every logged figure per step
and the summary; offline files in the run directory unless the user has logged in."""

from xirang import conf_folder, hookimpl
from xirang.specs import TrackerSpec
from xirang.tracking import run_event_hooks

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


# the run events go to the core's tracking layer, as every tracker's do
xirang_on_run_start, xirang_on_step_end, xirang_on_fault, xirang_on_run_end = run_event_hooks(NAME)


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
