"""Colossal-AI as parallel strategies: a xirang plan maps to a Booster plugin and training runs
through the Booster (``parallel=colossalai``, with ``plugin`` torch_ddp | low_level_zero |
gemini | hybrid_parallel).

Optional and not a pip extra: Colossal-AI 0.5.0 pins torch<=2.5.1, so it is installed next to
your torch without its dependency pins (docs/parallel.md). Without it the strategy still lists,
marked unavailable with the install command.
"""

from xirang import conf_folder, hookimpl
from xirang.specs import StrategySpec

INSTALL = (
    "pip install --no-deps colossalai==0.5.0 && pip install peft==0.13.2 transformers==4.51.3 "
    "'huggingface-hub<1.0' 'tokenizers<0.22' galore-torch bitsandbytes einops"
)


@hookimpl
def xirang_parallel_strategies() -> list[StrategySpec]:
    return [
        StrategySpec(
            name="colossalai",
            target="xirang_colossalai.strategy:ColossalStrategy",
            schema="xirang_colossalai.settings:ColossalConfig",
            description="Colossal-AI Booster: TorchDDP, LowLevelZero, Gemini or HybridParallel",
            requires=("colossalai",),
            install=INSTALL,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
