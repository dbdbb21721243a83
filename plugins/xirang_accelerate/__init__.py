"""Hugging Face Accelerate as a parallel strategy (``parallel=accelerate``): xirang's model and
loop, wrapped by ``Accelerator.prepare`` for data parallel (DDP) or sharded data parallel (FSDP2).

An optional extra: ``pip install 'xirang[accelerate]'``. Without it the strategy still lists
(``xirang plugins``), marked unavailable with that install command.
"""

from xirang import conf_folder, hookimpl
from xirang.specs import StrategySpec


@hookimpl
def xirang_parallel_strategies() -> list[StrategySpec]:
    return [
        StrategySpec(
            name="accelerate",
            target="xirang_accelerate.strategy:AccelerateStrategy",
            schema="xirang_accelerate.settings:AccelerateConfig",
            description="Hugging Face Accelerate: DDP or FSDP2 through Accelerator.prepare",
            requires=("accelerate",),
            install="pip install 'xirang[accelerate]'",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
