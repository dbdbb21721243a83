"""``parallel=colossalai``'s settings, apart from the strategy: checked when the run's config
is composed, without importing torch or Colossal-AI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang import ConfigError

PLUGINS = ("torch_ddp", "low_level_zero", "gemini", "hybrid_parallel")
GPU_ONLY = ("low_level_zero", "gemini", "hybrid_parallel")


@dataclass
class ColossalConfig:
    plugin: str = "torch_ddp"
    tp: int = 1
    pp: int = 1
    zero: int = 1
    #: micro-batches per step under pp > 1; 0 = the step's own (global batch / (dp x micro))
    micro_batches: int = 0
    precision: str = "fp32"

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``parallel`` section, refused here rather than in a worker."""
        check_plugin(settings.get("plugin", "torch_ddp"))
        return settings

    @staticmethod
    def check(config: dict[str, Any]) -> None:
        """Before any worker starts: hybrid_parallel only for a model it has a policy for."""
        if config["parallel"].get("plugin") == "hybrid_parallel":
            from xirang_colossalai.shard import check_shardable

            check_shardable(config)


def check_plugin(plugin: str) -> None:
    """Raise :class:`ConfigError` for a Booster plugin this strategy does not map."""
    if plugin not in PLUGINS:
        raise ConfigError(f"parallel.plugin={plugin!r}: valid plugins {PLUGINS}")
