"""The part of a device backend that is the same for every accelerator vendor.

A vendor backend subclasses :class:`AcceleratorBackend` and supplies four things: how to read
the node (:meth:`read`: its Python library, else its command-line tool), how to read the link
matrix (:meth:`link_topology`), which driver/runtime/torch combinations work (:meth:`compatibility`)
and, optionally, vendor events (:meth:`events`: XID, RAS). Detection, inventory, the common health
rules, calibration through torch and the torch device follow from those here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from xirang.devices.calibration import (
    cached_calibration,
    measure_device_to_device_gbps,
    measure_matmul_tflops,
    measure_memory_bandwidth_gbps,
)
from xirang.devices.health import DRAIN, OK, WARN, HealthLimits, assess, missing_from_driver
from xirang.devices.pci import SYSFS_PCI, pci_devices
from xirang.devices.reading import NodeReading
from xirang.devices.tools import ToolRunner, run_tool
from xirang.devices.visible import VisibleDevices, node_group
from xirang_core.errors import ConfigError
from xirang_core.specs import Calibration, DeviceBackendBase, DeviceInfo, HealthFinding, Topology

if TYPE_CHECKING:
    import torch

#: matmul edge for calibration: large enough to reach a data-centre GPU's sustained rate (an
#: H200 read 648 bf16 TFLOP/s at 4096, 0.66 of its datasheet; 8192 ran at 769-798 there)
CALIBRATION_MATMUL_SIZE = 8192
CALIBRATION_BUFFER_MB = 512


class AcceleratorBackend(DeviceBackendBase):
    """Implements :class:`xirang_core.specs.DeviceBackend` from a few vendor-specific methods."""

    type = ""
    #: the torch module and device type (``cuda`` also serves ROCm; Ascend's is ``npu``)
    torch_type = "cuda"
    collective = "nccl"
    vendor = ""
    pci_vendor_id = 0
    calibration_size = CALIBRATION_MATMUL_SIZE
    calibration_mbytes = CALIBRATION_BUFFER_MB
    #: seconds each figure is measured for, after a warm-up
    calibration_seconds = 0.3

    def __init__(
        self,
        runner: ToolRunner = run_tool,
        sysfs_pci: Path = SYSFS_PCI,
        limits: HealthLimits | None = None,
    ) -> None:
        self.run = runner
        self.sysfs_pci = Path(sysfs_pci)
        self.limits = limits or HealthLimits()

    # --- what a vendor supplies -------------------------------------------------------------

    def read(self) -> NodeReading:
        """This node's devices from the vendor library, else the vendor tool."""
        raise NotImplementedError

    def link_topology(self) -> Topology:
        """Groups from the vendor's link matrix; no groups when the tool printed none."""
        raise NotImplementedError

    def compatibility(self, node: NodeReading) -> list[HealthFinding]:
        """Driver vs runtime vs torch build; ``drain`` findings make the family unusable."""
        raise NotImplementedError

    def events(self, node: NodeReading) -> list[HealthFinding]:
        """Vendor error events (XID, RAS, alarms) already classified by severity."""
        return []

    def visible(self, node: NodeReading) -> VisibleDevices:
        """The devices of ``node`` this process's torch sees, in ordinal order
        (:mod:`xirang.devices.visible` applies the vendor's variables)."""
        from xirang.devices import visible

        return visible.cuda(node.devices, os.environ)

    def seen(self) -> NodeReading:
        """This node as torch numbers it: visible devices only, index = torch ordinal."""
        node = self.read()
        return self.visible(node).node(node)

    # --- the DeviceBackend protocol -----------------------------------------------------------

    def detect(self) -> tuple[bool, str]:
        """Usable here, or why not; never raises (a broken driver must not stop other backends)."""
        try:
            return self._detect()
        except Exception as exc:
            return False, f"{self.vendor} detection failed: {type(exc).__name__}: {exc}"

    def present(self) -> tuple[bool, str]:
        """Whether the vendor's driver lists usable devices, or why not, read with the vendor's
        library or tool only: ``xirang plugins`` asks this without importing torch, and
        :meth:`detect` goes on from the same reading to the driver/runtime/torch checks."""
        try:
            missing = self._missing(self.read())
        except Exception as exc:
            return False, f"{self.vendor} detection failed: {type(exc).__name__}: {exc}"
        return not missing, missing

    def _missing(self, node: NodeReading) -> str:
        """Why ``node`` has no usable device; empty when it has."""
        if not node.devices:
            return node.problem or f"no {self.vendor} devices found"
        if not node.usable:
            return f"all {len(node.devices)} {self.vendor} devices are lost"
        return ""

    def _detect(self) -> tuple[bool, str]:
        node = self.read()
        missing = self._missing(node)
        if missing:
            return False, missing
        visible = self.visible(node)
        seen = visible.node(node)
        if not seen.usable:
            why = f" ({visible.problem})" if visible.problem else ""
            return False, (
                f"{visible.rule or 'the visible-devices variable'} leaves none of the "
                f"{len(node.usable)} {self.vendor} device(s) visible to this process{why}"
            )
        blockers = [f.message for f in self.compatibility(node) if f.severity == DRAIN]
        if blockers:
            return False, "; ".join(blockers)
        first = seen.usable[0]
        return True, (
            f"{len(seen.usable)} x {first.model} (driver {node.driver or '?'}, "
            f"read with {node.source})"
        )

    def caveats(self) -> list[str]:
        """What works but may bite (only PTX for a GPU, an older CUDA minor, an unmappable
        device order): the run prints each as one line at start-up."""
        node = self.read()
        found = [f.message for f in self.compatibility(node) if f.severity == WARN]
        problem = self.visible(node).problem
        return [*found, problem] if problem else found

    def topology(self) -> Topology:
        """Link groups of the visible devices; without a link matrix, the one fact known: the
        devices share a node."""
        node = self.read()
        seen = self.visible(node)
        topology = seen.topology(self.link_topology())
        if topology.groups:
            return topology
        return node_group(d.index for d in seen.node(node).usable)

    def power_watts(self) -> dict[int, float]:
        """Power drawn now per device (torch ordinal), where the vendor source reports it (NVML
        does); cost metering prefers it to the configured ``watts`` of a device type."""
        return {d.index: d.power_w for d in self.seen().usable if d.power_w is not None}

    def inventory(self) -> list[DeviceInfo]:
        """The devices torch sees, by ordinal (each with its vendor index in ``extra``)."""
        node = self.seen()
        return [d.info(self.type, node.driver, node.runtime) for d in node.usable]

    def health(self) -> list[HealthFinding]:
        """Common rules, devices missing from the driver, vendor events, compatibility issues,
        for the devices this process sees (numbered by ordinal)."""
        node = self.read()
        if not node.devices:
            return [HealthFinding(None, "driver", DRAIN, node.problem or "no devices listed")]
        findings = assess(node.devices, self.limits)
        if all(d.pci_bus_id for d in node.devices):
            on_bus = self.granted(pci_devices(self.pci_vendor_id, self.sysfs_pci))
            findings += missing_from_driver(on_bus, node.devices, self.vendor)
        findings += self.events(node)
        findings += [f for f in self.compatibility(node) if f.severity != OK]
        visible = self.visible(node)
        if visible.problem:
            findings.append(HealthFinding(None, "visible", WARN, visible.problem))
        return visible.findings(findings)

    def granted(self, bus_ids: list[str]) -> list[str]:
        """Which of the vendor's devices on the PCI bus this process was given, so only those
        count as lost when the driver does not list them (sysfs is not namespaced: a container
        sees every device of the host). All of them, unless a backend can tell."""
        return bus_ids

    def calibrate(self, refresh: bool = False) -> Calibration:
        """Measured once per (device model, driver, torch), then cached; ``refresh`` remeasures.
        The measurement runs in a child process (:func:`measure_apart`)."""
        import torch

        node = self.seen()
        if not node.usable:
            raise ConfigError(f"device={self.type}: nothing to calibrate: {self.detect()[1]}")
        model = node.usable[0].model
        # the matmul edge is in the key: a figure measured at another size is measured again
        key = (
            f"{self.type}-{model}-driver{node.driver}-torch{torch.__version__}"
            f"-mm{self.calibration_size}"
        )
        return cached_calibration(
            key, lambda: measure_apart(self, model, len(node.usable)), refresh
        )

    def measure(self, model: str, count: int) -> Calibration:
        """Matmul rates, memory bandwidth and the device-0-to-1 link, in this process."""
        first = self.torch_device(0)
        second = self.torch_device(1) if count > 1 else None
        return Calibration(
            device_model=model,
            matmul_tflops=measure_matmul_tflops(
                first, self.calibration_dtypes(), self.calibration_size, self.calibration_seconds
            ),
            memory_bandwidth_gbps=measure_memory_bandwidth_gbps(
                first, self.calibration_mbytes, self.calibration_seconds
            ),
            link_bandwidth_gbps=(
                measure_device_to_device_gbps(
                    first, second, self.calibration_mbytes, self.calibration_seconds
                )
                if second is not None
                else None
            ),
        )

    def calibration_dtypes(self) -> list[str]:
        """Matmul dtypes worth measuring on this device: those it computes in, and TF32 (an fp32
        run's matmuls on CUDA) where torch has the switch."""
        names = [n for n in ("float32", "float16", "bfloat16") if self.supports_dtype(n)]
        return [*names, "tfloat32"] if self.torch_type == "cuda" else names

    def supports_dtype(self, name: str) -> bool:
        """Whether training can compute in ``name`` (a torch dtype name): bf16 only where the
        device has it."""
        if name != "bfloat16":
            return name in ("float32", "float16")
        import torch

        module = getattr(torch, self.torch_type)
        return bool(getattr(module, "is_bf16_supported", lambda: True)())

    def torch_device(self, local_rank: int) -> torch.device:
        """``<torch_type>:<local_rank>``, made current so collectives and kernels land on it."""
        import torch

        module = getattr(torch, self.torch_type, None)
        count = module.device_count() if module is not None else 0
        if local_rank >= count:
            raise ConfigError(
                f"worker with local rank {local_rank} needs {self.torch_type}:{local_rank}, but "
                f"torch sees {count} {self.vendor} device(s) here; lower trainer.nproc or check "
                f"the visible-devices variable ({self.visible_devices_variable()})"
            )
        assert module is not None  # a count above 0 came from it
        module.set_device(local_rank)
        return torch.device(self.torch_type, local_rank)

    def visible_devices_variable(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    def collective_backend(self) -> str:
        return self.collective


def measure_apart(backend: AcceleratorBackend, model: str, count: int) -> Calibration:
    """``backend.measure`` in a spawned child process, which takes the device context, the
    matmul operands and the copy buffers (``calibration_mbytes`` twice over) with it when it
    ends. Measured in the launching process they would stay for the whole run: that process
    only places workers, and a CUDA context and its caching allocator keep what they hold (and
    a forked worker could not use the device at all)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(backend.measure, model, count).result()
