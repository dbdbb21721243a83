"""The local scheduler (``scheduler=local``): this machine's devices, one process or N workers
through torch's elastic launcher (the engine behind torchrun)."""

from xirang import conf_folder, hookimpl
from xirang.specs import SchedulerSpec


@hookimpl
def xirang_schedulers() -> list[SchedulerSpec]:
    return [
        SchedulerSpec(
            name="local",
            target="xirang_local.scheduler:LocalScheduler",
            schema="xirang_local.settings:LocalConfig",
            description="run here: in-process for one worker, elastic launcher for several",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
