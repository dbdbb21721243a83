"""gloo: the collective backend that runs wherever torch does."""

from __future__ import annotations

from typing import Any

from torch import nn

from xirang_core.errors import ConfigError


class Gloo:
    name = "gloo"
    device_types = ("cpu",)

    def backend_for(self, device_type: str) -> str:
        if device_type not in self.device_types:
            raise ConfigError(
                f"comm=gloo cannot serve device type '{device_type}' here; use comm=auto, which "
                f"picks the device's own collective backend"
            )
        return "gloo"

    def install_hooks(self, model: nn.Module, ctx: Any) -> None:
        """Plain all-reduce is DDP's default; nothing to install."""
