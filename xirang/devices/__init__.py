"""What a device-backend plugin uses: the accelerator backend base class, the readers and
parsers for vendor tools, visible-device and torch-build compatibility checks, link tables,
health levels, calibration, and the replay runner its tests drive the parsers with.

``compat`` and ``visible`` are the shared modules themselves (a backend calls
``compat.check(...)`` and ``visible.everything(...)``). The names in ``__all__`` are the stable
surface for device plugins. Importing this module does not import torch.
"""

from xirang.devices import compat, visible
from xirang.devices.accelerator import AcceleratorBackend
from xirang.devices.calibration import (
    cached_calibration,
    measure_matmul_tflops,
    measure_memory_bandwidth_gbps,
)
from xirang.devices.compat import TorchBuild, blocker, caveat, short, version_tuple
from xirang.devices.health import DRAIN, OK, WARN, HealthLimits
from xirang.devices.linkmatrix import LinkTable, Tier, build_topology, parse_link_table
from xirang.devices.pci import SYSFS_PCI
from xirang.devices.reading import (
    DeviceReading,
    NodeReading,
    Sensor,
    bus_key,
    parse_float,
    parse_int,
)
from xirang.devices.replay import ReplayRunner
from xirang.devices.tools import ToolOutput, ToolRunner, import_optional, kernel_log, run_tool
from xirang.devices.visible import VENDOR_INDEX, VisibleDevices, everything
from xirang_core.devices.datasheet import datasheet

__all__ = [
    "DRAIN",
    "OK",
    "SYSFS_PCI",
    "VENDOR_INDEX",
    "WARN",
    "AcceleratorBackend",
    "DeviceReading",
    "HealthLimits",
    "LinkTable",
    "NodeReading",
    "ReplayRunner",
    "Sensor",
    "Tier",
    "ToolOutput",
    "ToolRunner",
    "TorchBuild",
    "VisibleDevices",
    "blocker",
    "build_topology",
    "bus_key",
    "cached_calibration",
    "caveat",
    "compat",
    "datasheet",
    "everything",
    "import_optional",
    "kernel_log",
    "measure_matmul_tflops",
    "measure_memory_bandwidth_gbps",
    "parse_float",
    "parse_int",
    "parse_link_table",
    "run_tool",
    "short",
    "version_tuple",
    "visible",
]
