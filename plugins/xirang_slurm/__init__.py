"""Slurm as an executor of the pool and as a run scheduler (``scheduler=slurm``): sbatch of a
script that starts one srun task per worker on the nodes chosen, node inventory from
``scontrol show node``, and draining bad nodes with ``scontrol``."""

from xirang import conf_folder, hookimpl
from xirang.specs import SchedulerSpec


@hookimpl
def xirang_schedulers() -> list[SchedulerSpec]:
    return [
        SchedulerSpec(
            name="slurm",
            target="xirang_slurm.scheduler:SlurmScheduler",
            schema="xirang_slurm.scheduler:SlurmConfig",
            description="sbatch the run's workers (one srun task each) on Slurm nodes and wait",
            tools=("sbatch",),
            executor="xirang_slurm.executor:SlurmExecutor",
            inventory="xirang_slurm.inventory:nodes",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
