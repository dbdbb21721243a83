"""Inventory, topology, health and calibration of the host CPU."""

from __future__ import annotations

import os
import platform
import shutil

import torch

from xirang_core.devices.calibration import (
    cached_calibration,
    measure_matmul_tflops,
    measure_memory_bandwidth_gbps,
)
from xirang_core.specs import Calibration, DeviceInfo, HealthFinding, InterconnectGroup, Topology

#: matmul edge for calibration: each call long enough (~10 ms on two cores) that the threads'
#: barrier waits on a busy host do not dominate it, as they did at 512
CALIBRATION_MATMUL_SIZE = 1024
#: free memory below this fraction of the total makes the host unfit for new work
LOW_MEMORY_FRACTION = 0.05


class CpuBackend:
    """The whole host CPU counts as one device; worker processes share its cores."""

    type = "cpu"
    #: several worker processes may share the host CPU, each with its share of the cores
    shareable = True

    def detect(self) -> tuple[bool, str]:
        return True, "the host CPU is always available"

    def inventory(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                type="cpu",
                index=0,
                model=cpu_model(),
                memory_bytes=_total_memory(),
                runtime=f"torch {torch.__version__}",
                extra={"cores": os.cpu_count() or 1, "arch": platform.machine()},
            )
        ]

    def topology(self) -> Topology:
        return Topology(groups=(InterconnectGroup(name="host", link="node", devices=(0,)),))

    def health(self) -> list[HealthFinding]:
        total, free = _total_memory(), _available_memory()
        if total and free / total < LOW_MEMORY_FRACTION:
            return [
                HealthFinding(0, "memory", "warn", f"only {free / 2**30:.1f} GiB of memory is free")
            ]
        usage = shutil.disk_usage("/")
        if usage.free / usage.total < LOW_MEMORY_FRACTION:
            return [
                HealthFinding(0, "disk", "warn", f"root disk {usage.free / 2**30:.1f} GiB free")
            ]
        return [HealthFinding(0, "memory", "ok", f"{free / 2**30:.1f} GiB free")]

    def calibrate(self, refresh: bool = False) -> Calibration:
        threads = torch.get_num_threads()
        # v2: dtypes measured in turns on larger matmuls (v1 entries could hold a bf16 figure
        # measured during a burst of other work, at 0.001 TFLOP/s)
        key = f"cpu-{cpu_model()}-{threads}threads-torch{torch.__version__}-v2"
        return cached_calibration(key, lambda: self._measure(threads), refresh)

    def _measure(self, threads: int) -> Calibration:
        device = torch.device("cpu")
        return Calibration(
            device_model=cpu_model(),
            matmul_tflops=measure_matmul_tflops(
                device, ["float32", "bfloat16"], size=CALIBRATION_MATMUL_SIZE, seconds=0.6
            ),
            memory_bandwidth_gbps=measure_memory_bandwidth_gbps(device, mbytes=64),
        )

    def supports_dtype(self, name: str) -> bool:
        """Whether training can compute in ``name`` (a torch dtype name) here: float32 always;
        bfloat16 and float16 where torch's CPU autocast runs them."""
        if name == "float32":
            return True
        return torch.amp.autocast_mode.is_autocast_available("cpu") and name in (
            "bfloat16",
            "float16",
        )

    def torch_device(self, local_rank: int) -> torch.device:
        return torch.device("cpu")

    def collective_backend(self) -> str:
        return "gloo"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return _total_memory()
