"""Read Ascend NPUs from ``npu-smi info``.

npu-smi has no machine-readable mode; its table gives two lines per chip, the first
``| <npu> <name> | <health> | <power> <temp> <hugepages> |`` and the second
``| <chip> | <bus id> | <aicore%> <memory used / total> <HBM used / total> |``, followed by a
process table. The ``Health`` column is the chip's alarm level: OK, Warning, Alarm or Critical.
"""

from __future__ import annotations

import itertools
import re

from xirang.devices import DeviceReading, NodeReading, parse_float

COMMAND = ("npu-smi", "info")
MB = 2**20
_VERSION = re.compile(r"Version:\s*(\S+)")
_USAGE = re.compile(r"(\d+)\s*/\s*(\d+)")


def read(stdout: str, error: str = "") -> NodeReading:
    """The node as ``npu-smi info`` reports it; ``error`` explains an empty answer."""
    rows = [cells for line in stdout.splitlines() if (cells := _cells(line))]
    devices: list[DeviceReading] = []
    for first, second in itertools.pairwise(rows):
        device = parse_pair(first, second, len(devices))
        if device is not None:
            devices.append(device)
    version = _VERSION.search(stdout)
    return NodeReading(
        "npu-smi",
        tuple(devices),
        driver=version[1] if version else "",
        problem="" if devices else (error or "npu-smi listed no NPUs"),
    )


def parse_pair(first: list[str], second: list[str], ordinal: int) -> DeviceReading | None:
    """A chip from its two table lines, or None when ``first`` does not open a chip entry."""
    head = first[0].split(maxsplit=1)
    if len(head) != 2 or not head[0].isdigit() or not re.match(r"[0-9A-Fa-f]{4}:", second[1]):
        return None
    npu, name = int(head[0]), head[1]
    health = first[1]
    power_temp = first[2].split()
    usage = [(int(u), int(t)) for u, t in _USAGE.findall(second[2])]
    total_mb = next((t for _, t in reversed(usage) if t), 0)  # HBM when present, else DDR
    return DeviceReading(
        index=ordinal,
        model=f"Ascend {name}" if not name.lower().startswith("ascend") else name,
        memory_bytes=total_mb * MB,
        pci_bus_id=second[1],
        temperature_c=parse_float(power_temp[1]) if len(power_temp) > 1 else None,
        extra={
            "npu_id": npu,
            "chip_id": int(second[0]) if second[0].isdigit() else 0,
            "health": health,
        },
    )


def _cells(line: str) -> list[str] | None:
    """The three cells of a ``| a | b | c |`` table line; None for borders and other lines."""
    if not line.startswith("|") or line.count("|") != 4:
        return None
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
