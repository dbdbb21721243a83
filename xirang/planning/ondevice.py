"""Where the planner's measurements run: on the run's own device type, with its collective
backend. A GPU plan timed on the CPU over gloo says nothing about the GPU run it picks for, so
the smoke runs and the host probe ask the run's device backend for each rank's device, and
open their process group with the backend the run's workers will use (NCCL, RCCL, HCCL)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RunDevice:
    """The run's device section (its name resolved) and its collective backend."""

    device: dict[str, Any]
    collective: str

    def torch_device(self, rank: int) -> torch.device:
        """Rank ``rank``'s device on this host, made current, as a worker's is."""
        from xirang_core.plugins import get_registry

        return get_registry().create("device", self.device).torch_device(rank)


def run_device(config: dict[str, Any]) -> RunDevice:
    """The device and collective backend a run of ``config`` trains on (``device=auto``
    resolved as the run resolves it)."""
    from xirang_core.devices.choice import collective_for, pick_device
    from xirang_core.plugins import get_registry
    from xirang_core.specs.kinds import AUTO

    registry = get_registry()
    device = dict(config["device"])
    if device["name"] == AUTO:
        device = {"name": pick_device(registry)}
    runtime = config.get("runtime") or {}
    collective = runtime.get("collective_backend") or collective_for(
        config, registry, registry.create("device", device)
    )
    return RunDevice(device, collective)
