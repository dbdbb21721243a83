"""NVIDIA GPUs: NVML when nvidia-ml-py is installed, else nvidia-smi; NCCL for collectives."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from xirang.devices import (
    VENDOR_INDEX,
    AcceleratorBackend,
    NodeReading,
    bus_key,
    import_optional,
    kernel_log,
)
from xirang.devices import compat as shared
from xirang.specs import DeviceInfo, HealthFinding, Topology
from xirang_cuda import compat, fabric, nvml, smi, topo, xid

#: the minor number in the driver's ``/proc/driver/nvidia/gpus/<bus>/information``
_MINOR = re.compile(r"Device Minor:\s*(\d+)")


class CudaBackend(AcceleratorBackend):
    """``device=cuda``: one device per GPU, ``cuda:<local_rank>``, NCCL process groups."""

    type = "cuda"
    torch_type = "cuda"
    collective = "nccl"
    vendor = "NVIDIA"
    pci_vendor_id = 0x10DE
    #: the Python binding of NVML (from the nvidia-ml-py distribution); optional
    library = "pynvml"
    #: the driver's per-GPU folders and the device nodes: what a container was given
    procfs_gpus = Path("/proc/driver/nvidia/gpus")
    dev = Path("/dev")

    def granted(self, bus_ids: list[str]) -> list[str]:
        """The GPUs whose driver folder and ``/dev/nvidia<minor>`` node this process sees. A
        container given 1 of 8 GPUs (Docker's ``--gpus``, a Kubernetes device plugin) sees all
        8 on the PCI bus, but the NVIDIA container runtime shows it only its own GPUs' folders
        and nodes; without this, the 7 others read as fallen off the bus and drained the node.
        A GPU that fell off stays in the driver's folder, so it is still caught. Without the
        driver's folder (no driver loaded) every GPU on the bus counts."""
        if not self.procfs_gpus.is_dir():
            return bus_ids
        return [bus for bus in bus_ids if self._has_node(self.procfs_gpus / bus / "information")]

    def _has_node(self, information: Path) -> bool:
        try:
            found = _MINOR.search(information.read_text())
        except OSError:  # hidden from this container, or not the driver's
            return False
        return found is not None and (self.dev / f"nvidia{found[1]}").exists()

    def read(self) -> NodeReading:
        """NVML first (exact thresholds, no subprocess), nvidia-smi when NVML is absent or fails."""
        module = import_optional(self.library)
        if module is not None:
            node = nvml.read(module)
            if node.devices:
                return node
        node = smi.read(self.run)
        if node.devices or module is not None:
            return node
        return NodeReading(
            "nvidia-smi",
            problem=f"no NVIDIA driver found ({node.problem}; {self.library} not installed)",
        )

    def inventory(self) -> list[DeviceInfo]:
        """Devices plus each GPU's nearest NIC and CPU/NUMA affinity from the topology matrix,
        and its multi-node NVLink domain where it has one."""
        devices = super().inventory()
        facts = topo.affinity(self.run(topo.COMMAND).stdout)
        domain = fabric.domains(fabric.parse_fabric(self.run(fabric.COMMAND).stdout))
        return [dataclasses.replace(d, extra=_extra(d, facts, domain)) for d in devices]

    def link_topology(self) -> Topology:
        return topo.topology(self.run(topo.COMMAND).stdout)

    def events(self, node: NodeReading) -> list[HealthFinding]:
        index_by_bus = {bus_key(d.pci_bus_id): d.index for d in node.devices if d.pci_bus_id}
        links = fabric.parse_fabric(self.run(fabric.COMMAND).stdout)
        return [
            *xid.xid_findings(kernel_log(self.run), index_by_bus),
            *fabric.fabric_findings(links, index_by_bus),
        ]

    def compatibility(self, node: NodeReading) -> list[HealthFinding]:
        return compat.check(node, shared.torch_build(), compat.torch_cuda(), self.visible(node))


def _extra(
    device: DeviceInfo, facts: dict[int, dict[str, str]], domains: dict[str, str]
) -> dict[str, object]:
    extra = {**device.extra, **facts.get(device.extra.get(VENDOR_INDEX, device.index), {})}
    domain = domains.get(bus_key(device.pci_bus_id))
    return {**extra, "nvlink_domain": domain} if domain else extra
