"""Native PyTorch parallel strategies (``parallel=single|ddp``)."""

from pathlib import Path

from xirang import hookimpl
from xirang.specs import StrategySpec


@hookimpl
def xirang_parallel_strategies() -> list[StrategySpec]:
    return [
        StrategySpec(
            name="single",
            target="xirang_torch.single:SingleProcess",
            description="one process, no wrapping",
            multi_process=False,
        ),
        StrategySpec(
            name="ddp",
            target="xirang_torch.ddp:DistributedDataParallel",
            schema="xirang_torch.ddp:DDPConfig",
            description="data parallel: full replica per worker, gradients all-reduced in buckets",
        ),
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return [f"file://{Path(__file__).parent / 'conf'}"]
