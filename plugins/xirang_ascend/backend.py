"""Huawei Ascend NPUs: npu-smi for inventory and health, torch_npu to train, HCCL to talk.

npu-smi is read first because it alone reports bus ids, temperatures and alarm levels; when it is
absent (a container without the driver tools mounted) torch_npu still gives the inventory.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import TYPE_CHECKING

from xirang.devices import (
    DRAIN,
    OK,
    WARN,
    AcceleratorBackend,
    DeviceReading,
    NodeReading,
    VisibleDevices,
    visible,
)
from xirang.devices import compat as shared
from xirang.specs import HealthFinding, Topology
from xirang_ascend import compat, smi, topo

if TYPE_CHECKING:
    import torch

#: npu-smi's Health column mapped onto the shared severities (minor, major, critical alarm)
HEALTH_LEVELS = {"OK": OK, "WARNING": WARN, "ALARM": DRAIN, "CRITICAL": DRAIN}


class AscendBackend(AcceleratorBackend):
    """``device=ascend``: ``npu:<local_rank>`` through torch_npu, HCCL process groups."""

    type = "ascend"
    torch_type = "npu"
    collective = "hccl"
    vendor = "Ascend"
    pci_vendor_id = 0x19E5

    def read(self) -> NodeReading:
        result = self.run(smi.COMMAND)
        node = smi.read(result.stdout, result.error)
        if node.devices:
            return node
        from_torch = _read_torch_npu()
        if from_torch.devices:
            return from_torch
        return NodeReading(
            "npu-smi", problem=f"no Ascend driver found ({node.problem}; {from_torch.problem})"
        )

    def link_topology(self) -> Topology:
        return topo.topology(self.run(topo.COMMAND).stdout)

    def events(self, node: NodeReading) -> list[HealthFinding]:
        """npu-smi's alarm level per chip, where it is not OK."""
        findings = []
        for device in node.devices:
            level = str(device.extra.get("health", "OK"))
            severity = HEALTH_LEVELS.get(level.upper(), WARN)
            if severity != OK:
                findings.append(
                    HealthFinding(device.index, "alarm", severity, f"npu-smi health is {level}")
                )
        return findings

    def compatibility(self, node: NodeReading) -> list[HealthFinding]:
        cann = os.environ.get("ASCEND_TOOLKIT_HOME") or os.environ.get("ASCEND_HOME_PATH", "")
        return compat.check(node, shared.torch_build(), torch_npu_view(), cann)

    def visible(self, node: NodeReading) -> VisibleDevices:
        """ASCEND_RT_VISIBLE_DEVICES over npu-smi's chips; torch_npu's own listing already
        holds only the devices it sees."""
        if node.source == "torch_npu":
            return visible.everything(node.devices)
        return visible.ascend(node.devices, os.environ)

    def supports_dtype(self, name: str) -> bool:
        """bf16 where torch_npu says so; a torch_npu without ``is_bf16_supported`` is asked per
        SoC: Ascend 910B/910_93 and later compute in bf16, the first-generation 910 (910A,
        910ProA/ProB, 910PremiumA) and the 310 family do not."""
        if name != "bfloat16":
            return super().supports_dtype(name)
        try:
            npu = importlib.import_module("torch_npu").npu
        except Exception:  # no torch_npu: nothing computes on the NPU at all
            return False
        if hasattr(npu, "is_bf16_supported"):
            return bool(npu.is_bf16_supported())
        return soc_has_bf16(_soc_name(npu, self.seen()))

    def torch_device(self, local_rank: int) -> torch.device:
        importlib.import_module("torch_npu")  # registers torch.npu
        return super().torch_device(local_rank)

    def visible_devices_variable(self) -> str:
        return "ASCEND_RT_VISIBLE_DEVICES"


#: SoC names with bf16 arithmetic (Ascend 910B1-B4, the 910_93 parts of Atlas A3, 910C, 950)
_BF16_SOC = re.compile(r"910B\d|910_9[3-9]|910C|95\d", re.IGNORECASE)


def soc_has_bf16(soc: str) -> bool:
    """Whether the SoC ``soc`` (``Ascend910B3``, npu-smi's ``910B3``) computes in bf16; the
    first 910 generation is named 910A/910ProA/910ProB/910PremiumA, so "B" alone says nothing."""
    return bool(_BF16_SOC.search(soc.replace(" ", "")))


def _soc_name(npu: object, node: NodeReading) -> str:
    """The SoC as torch_npu names it (``get_soc_name``, newer releases), else the chip's name
    as npu-smi lists it."""
    named = getattr(npu, "get_soc_name", None)
    try:
        if callable(named) and named():
            return str(named())
    except Exception:  # an older CANN without the query: npu-smi's name says the same
        pass
    return node.usable[0].model if node.usable else ""


def torch_npu_view() -> compat.TorchNpu:
    """torch_npu's version and what it sees, or why it cannot be imported."""
    try:
        module = importlib.import_module("torch_npu")
    except Exception as exc:  # missing, or CANN libraries not on the loader path
        return compat.TorchNpu(import_error=f"{type(exc).__name__}: {exc}")
    npu = module.npu
    available = bool(npu.is_available())
    return compat.TorchNpu(
        str(getattr(module, "__version__", "")),
        "",
        available,
        npu.device_count() if available else 0,
    )


def _read_torch_npu() -> NodeReading:
    """Inventory from torch_npu alone: names and memory, without bus ids or health counters."""
    view = torch_npu_view()
    if not view.available:
        missing = "No module named" in view.import_error
        why = (
            "torch_npu not installed" if missing else view.import_error or "torch_npu sees no NPUs"
        )
        return NodeReading("torch_npu", problem=why)
    npu = importlib.import_module("torch_npu").npu  # imported above: torch_npu_view

    devices = tuple(
        DeviceReading(
            index=i,
            model=npu.get_device_name(i),
            memory_bytes=int(npu.get_device_properties(i).total_memory),
        )
        for i in range(view.count)
    )
    return NodeReading("torch_npu", devices)
