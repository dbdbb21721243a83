"""NVIDIA GPUs: NVML when nvidia-ml-py is installed, else nvidia-smi; NCCL for collectives."""

from __future__ import annotations

import dataclasses

from xirang_core.devices import compat as shared
from xirang_core.devices.accelerator import AcceleratorBackend
from xirang_core.devices.reading import NodeReading, bus_key
from xirang_core.devices.tools import import_optional, kernel_log
from xirang_core.devices.visible import VENDOR_INDEX
from xirang_core.specs import DeviceInfo, HealthFinding, Topology
from xirang_cuda import compat, fabric, nvml, smi, topo, xid


class CudaBackend(AcceleratorBackend):
    """``device=cuda``: one device per GPU, ``cuda:<local_rank>``, NCCL process groups."""

    type = "cuda"
    torch_type = "cuda"
    collective = "nccl"
    vendor = "NVIDIA"
    pci_vendor_id = 0x10DE
    #: the Python binding of NVML (from the nvidia-ml-py distribution); optional
    library = "pynvml"

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
