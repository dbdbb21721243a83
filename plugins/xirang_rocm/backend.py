"""AMD GPUs: amdsmi when installed, else rocm-smi; RCCL (torch's ``nccl`` name) for collectives."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from xirang.devices import (
    SYSFS_PCI,
    AcceleratorBackend,
    HealthLimits,
    NodeReading,
    ToolRunner,
    VisibleDevices,
    bus_key,
    import_optional,
    kernel_log,
    run_tool,
    visible,
)
from xirang.devices import compat as shared
from xirang.specs import HealthFinding, Topology
from xirang_rocm import amdsmi_reader, compat, hwmon, ras, smi, topo


class RocmBackend(AcceleratorBackend):
    """``device=rocm``: a ROCm build of torch exposes AMD GPUs as ``cuda:<n>``."""

    type = "rocm"
    torch_type = "cuda"
    # torch.distributed names RCCL "nccl" on ROCm builds
    collective = "nccl"
    vendor = "AMD"
    pci_vendor_id = 0x1002
    library = "amdsmi"

    def __init__(
        self,
        runner: ToolRunner = run_tool,
        sysfs_pci: Path = SYSFS_PCI,
        limits: HealthLimits | None = None,
        rocm_path: str | Path | None = None,
    ) -> None:
        super().__init__(runner, sysfs_pci, limits)
        self.rocm_path = Path(rocm_path or os.environ.get("ROCM_PATH") or "/opt/rocm")

    def read(self) -> NodeReading:
        module = import_optional(self.library)
        node = amdsmi_reader.read(module) if module is not None else None
        if node is None or not node.devices:
            result = self.run(smi.QUERY)
            node = smi.read(result.stdout, result.error)
            if not node.devices and module is None:
                return NodeReading(
                    "rocm-smi",
                    problem=f"no AMD GPU driver found ({node.problem}; amdsmi not installed)",
                )
        if not node.devices:
            return node
        node = dataclasses.replace(node, runtime=node.runtime or self.host_rocm())
        node = _with_hwmon_limits(node, self.sysfs_pci)
        return _with_ras(node, ras.parse_ras(self.run(ras.COMMAND).stdout))

    def link_topology(self) -> Topology:
        return topo.topology(self.run(topo.COMMAND).stdout)

    def events(self, node: NodeReading) -> list[HealthFinding]:
        index_by_bus = {bus_key(d.pci_bus_id): d.index for d in node.devices if d.pci_bus_id}
        found = ras.uncorrectable_blocks(ras.parse_ras(self.run(ras.COMMAND).stdout))
        return found + ras.kernel_findings(kernel_log(self.run), index_by_bus)

    def compatibility(self, node: NodeReading) -> list[HealthFinding]:
        visible_node = self.visible(node).node(node)
        return compat.check(
            visible_node, shared.torch_build(), compat.torch_rocm(), self.host_rocm()
        )

    def visible(self, node: NodeReading) -> VisibleDevices:
        """ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES)."""
        return visible.rocm(node.devices, os.environ)

    def host_rocm(self) -> str:
        """The installed ROCm release, from ``$ROCM_PATH/.info/version`` (empty if unknown)."""
        try:
            return (self.rocm_path / ".info" / "version").read_text().strip()
        except OSError:
            return ""

    def visible_devices_variable(self) -> str:
        return "HIP_VISIBLE_DEVICES"


def _with_hwmon_limits(node: NodeReading, sysfs_pci: Path) -> NodeReading:
    """Each sensor's own limits from the driver's hwmon files, where the source gave none
    (rocm-smi's JSON has current temperatures only)."""
    devices = tuple(
        dataclasses.replace(d, sensors=hwmon.with_limits(d.sensors, found))
        if d.pci_bus_id and (found := hwmon.limits(sysfs_pci, d.pci_bus_id))
        else d
        for d in node.devices
    )
    return dataclasses.replace(node, devices=devices)


def _with_ras(node: NodeReading, counts: dict[int, dict[str, tuple[int, int]]]) -> NodeReading:
    """Corrected-error totals from RAS where the source gave none (rocm-smi's JSON has none).

    Uncorrectable counts stay out of the reading: :func:`ras.uncorrectable_blocks` reports them
    per hardware block, which says more than a total would.
    """
    devices = tuple(
        dataclasses.replace(d, ecc_corrected=ras.totals(counts[d.index])[0])
        if d.ecc_corrected is None and d.index in counts
        else d
        for d in node.devices
    )
    return dataclasses.replace(node, devices=devices)
