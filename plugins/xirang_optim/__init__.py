"""The built-in optimizers (``optim.name=adamw|sgd``) and learning-rate schedule
(``schedule=cosine``), registered through the same hooks a third-party plugin uses."""

from xirang import conf_folder, hookimpl
from xirang.specs import LRScheduleSpec, OptimizerSpec


@hookimpl
def xirang_optimizers() -> list[OptimizerSpec]:
    return [
        OptimizerSpec(
            name="adamw",
            target="xirang_optim.optimizers:adamw",
            description="AdamW: optim.lr, beta1, beta2, weight_decay (matrices only)",
        ),
        OptimizerSpec(
            name="sgd",
            target="xirang_optim.optimizers:sgd",
            description="SGD with momentum optim.beta1",
        ),
    ]


@hookimpl
def xirang_lr_schedules() -> list[LRScheduleSpec]:
    return [
        LRScheduleSpec(
            name="cosine",
            target="xirang_optim.schedules:WarmupCosine",
            description="linear warm-up over optim.warmup_steps, cosine decay to optim.min_lr",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
