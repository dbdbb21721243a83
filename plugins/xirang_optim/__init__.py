"""The built-in optimizers (``optim.name=adamw|sgd``) and learning-rate schedules
(``schedule=cosine|linear|constant|wsd``), registered through the same hooks a third-party
plugin uses."""

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
        ),
        LRScheduleSpec(
            name="linear",
            target="xirang_optim.schedules:WarmupLinear",
            description="linear warm-up over optim.warmup_steps, linear decay to optim.min_lr",
        ),
        LRScheduleSpec(
            name="constant",
            target="xirang_optim.schedules:WarmupConstant",
            description="linear warm-up over optim.warmup_steps, then optim.lr throughout",
        ),
        LRScheduleSpec(
            name="wsd",
            target="xirang_optim.schedules:WarmupStableDecay",
            schema="xirang_optim.schedules:WSDConfig",
            description="warm-up, optim.lr, then linear decay to optim.min_lr over the last "
            "schedule.decay_fraction of the steps",
        ),
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
