"""``parallel=accelerate``'s settings, apart from the strategy: checked when the run's config
is composed, without importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang import ConfigError

MODES = ("ddp", "fsdp")


@dataclass
class AccelerateConfig:
    mode: str = "ddp"
    reshard_after_forward: bool = True

    def __post_init__(self) -> None:
        """Refuse a mode Accelerate is not asked for here, wherever the settings are built."""
        if self.mode not in MODES:
            raise ConfigError(f"parallel.mode={self.mode!r}: valid modes are {MODES}")

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``parallel`` section, refused here rather than in a worker."""
        AccelerateConfig(**settings)
        return settings

    @staticmethod
    def check(data: dict[str, Any]) -> None:
        """The whole run's config (the kernel's strategy check): FSDP mode on ``device=cpu``
        is refused before any worker starts, as Accelerate shards only on accelerators."""
        if data["parallel"].get("mode") == "fsdp" and data["device"]["name"] == "cpu":
            raise ConfigError(
                "parallel=accelerate parallel.mode=fsdp: Accelerate shards only on "
                "accelerators, not device=cpu. Use parallel.mode=ddp, or parallel=fsdp on the CPU"
            )
