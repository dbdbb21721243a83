"""The machines a plan is for: this host's devices (inventory and calibration), or a cluster
described in a planner plugin's ``cluster`` option files (one that is not here: DGX A100, H100,
MI300X, ...)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from xirang_core.devices.choice import pick_device
from xirang_core.plugins import get_registry


@dataclass(frozen=True)
class ClusterShape:
    """Devices and links, as the time and memory models need them."""

    name: str
    device: str
    nodes: int
    devices_per_node: int
    memory_gb: float
    #: sustained FLOP/s of one device for the training dtype (measured, not datasheet)
    tflops: float
    intra_gbps: float  # GB/s per device inside a node (NVLink/NVSwitch, xGMI, HCCS, loopback)
    inter_gbps: float  # GB/s per device between nodes (InfiniBand, RoCE, Ethernet)
    latency_us: float = 10.0  # per ring hop
    dtype_bytes: int = 2  # bytes per parameter/activation element the run trains in
    #: workers share this host's cores (CPU workers): step times come from measuring it
    shared: bool = False

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * 2**30)

    def link_gbps(self, group: int, stride: int) -> float:
        """Bandwidth of a ring over ``group`` ranks spaced ``stride`` apart: it stays in a node
        only when the whole group fits inside one."""
        return self.intra_gbps if group * stride <= self.devices_per_node else self.inter_gbps


def local_cluster(workers: int, registry: Any = None, device: str = "auto") -> ClusterShape:
    """This host as the device plugin reports it, for ``workers`` worker processes.

    CPU workers share the host's cores and memory: each gets ``cores / workers`` of the
    calibrated rate and ``memory / workers`` of the memory; accelerators count one per worker.
    """

    registry = registry or get_registry()
    name = pick_device(registry) if device == "auto" else device
    backend = registry.create("device", {"name": name})
    inventory = backend.inventory()
    calibration = backend.calibrate()
    shared = backend.shareable
    share = 1 / workers if shared else 1.0
    cores = os.cpu_count() or 1
    rate = calibration.peak_flops("float32") / 1e12
    if shared:
        rate *= min(1.0, cores / workers)
    return ClusterShape(
        name=f"local-{name}",
        device=inventory[0].model,
        nodes=1,
        devices_per_node=workers if shared else len(inventory),
        memory_gb=inventory[0].memory_bytes * share / 2**30,
        tflops=rate,
        intra_gbps=calibration.link_bandwidth_gbps or calibration.memory_bandwidth_gbps / 4,
        inter_gbps=calibration.link_bandwidth_gbps or calibration.memory_bandwidth_gbps / 4,
        latency_us=50.0 if shared else 10.0,
        dtype_bytes=4,
        shared=shared,
    )
