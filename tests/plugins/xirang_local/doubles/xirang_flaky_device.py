"""A test double of a device plugin: N local devices (run on the CPU), one of which its health
probe reports as failing once the run has a committed checkpoint at or past a given step.

It is registered the way any third-party plugin is, through an entry point of the ``xirang``
group (the test writes its ``.dist-info`` on ``PYTHONPATH``), so the scheduler and the workers
ask its ``health()`` exactly as they ask a vendor plugin's. The "clock" is the run's committed
checkpoints, not time, so the failure shows at the same step in every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from xirang import conf_folder, hookimpl
from xirang.specs import (
    Calibration,
    DeviceBackendSpec,
    DeviceInfo,
    HealthFinding,
    InterconnectGroup,
    Topology,
)
from xirang_core.checkpoint.manifest import MANIFEST_FILE, parse_step_dir


@dataclass
class FlakyConfig:
    devices: int = 2
    drain_device: int = 1
    drain_after_step: int = 0  # 0: never fails
    run_dir: str = ""


class FlakyBackend:
    type = "cpu"  # priced and collected as the CPU
    shareable = False

    def __init__(
        self, devices: int = 2, drain_device: int = 1, drain_after_step: int = 0, run_dir: str = ""
    ) -> None:
        self.devices, self.drain_device = devices, drain_device
        self.drain_after_step, self.run_dir = drain_after_step, run_dir

    def detect(self) -> tuple[bool, str]:
        return True, "test devices on the host CPU"

    def inventory(self) -> list[DeviceInfo]:
        return [DeviceInfo("cpu", i, "flaky test device", 1 << 30) for i in range(self.devices)]

    def topology(self) -> Topology:
        return Topology((InterconnectGroup("host", "node", tuple(range(self.devices))),))

    def health(self) -> list[HealthFinding]:
        if self.drain_after_step and self._committed_step() >= self.drain_after_step:
            message = "uncorrectable ECC errors (injected by the test)"
            return [HealthFinding(self.drain_device, "ecc", "drain", message)]
        return [HealthFinding(None, "ecc", "ok", "no errors")]

    def _committed_step(self) -> int:
        folder = Path(self.run_dir) / "checkpoints"
        steps = [parse_step_dir(p.parent.name) for p in folder.glob(f"*/{MANIFEST_FILE}")]
        return max((s for s in steps if s is not None), default=0)

    def calibrate(self, refresh: bool = False) -> Calibration:
        return Calibration("flaky test device", {"float32": 0.05}, 10.0)

    def torch_device(self, local_rank: int) -> torch.device:
        return torch.device("cpu")

    def collective_backend(self) -> str:
        return "gloo"


@hookimpl
def xirang_device_backends() -> list[DeviceBackendSpec]:
    return [
        DeviceBackendSpec(
            name="flaky",
            target="xirang_flaky_device:FlakyBackend",
            schema="xirang_flaky_device:FlakyConfig",
            description="test double: local devices, one failing its health probe mid-run",
            priority=-100,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
