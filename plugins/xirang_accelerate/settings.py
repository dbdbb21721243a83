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

    def check(self) -> None:
        """Raise :class:`ConfigError` for a mode Accelerate is not asked for here."""
        if self.mode not in MODES:
            raise ConfigError(f"parallel.mode={self.mode!r}: valid modes are {MODES}")

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``parallel`` section, refused here rather than in a worker."""
        AccelerateConfig(**settings).check()
        return settings
