"""Native PyTorch parallel strategies (``parallel=single|ddp|fsdp|tp|sp|pp|hybrid``)."""

from xirang import conf_folder, hookimpl
from xirang.specs import StrategySpec

#: presets of one mesh strategy (their conf/parallel/*.yaml set the degrees)
MESH_STRATEGIES = {
    "fsdp": "sharded data parallel (FSDP2 fully_shard), ZeRO stage 1, 2 or 3",
    "tp": "tensor parallel: attention heads and MLP columns split over workers (DTensor)",
    "sp": "tensor + sequence parallel: activations between layers split along the sequence",
    "pp": "pipeline parallel: balanced layer stages, gpipe or 1f1b micro-batch schedule",
    "hybrid": "any mix of dp, tp, pp over a device mesh (e.g. parallel.tp=2 parallel.pp=2)",
}


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
            schema="xirang_torch.settings:DDPConfig",
            description="data parallel: full replica per worker, gradients all-reduced in buckets",
        ),
        *(
            StrategySpec(
                name=name,
                target="xirang_torch.strategy:MeshStrategy",
                schema="xirang_torch.settings:MeshConfig",
                description=description,
            )
            for name, description in MESH_STRATEGIES.items()
        ),
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
