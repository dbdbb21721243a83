"""Accelerators as the PCI bus sees them, independent of any vendor driver or tool."""

from __future__ import annotations

from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")
#: PCI class codes (upper 16 bits of ``class``) of compute devices: VGA, 3D controller, and
#: processing accelerator; NVSwitches and bridges of the same vendors are deliberately excluded
ACCELERATOR_CLASSES = frozenset({0x0300, 0x0302, 0x1200})


def pci_devices(vendor_id: int, root: Path = SYSFS_PCI) -> list[str]:
    """Bus ids of accelerators from ``vendor_id`` (0x10de NVIDIA, 0x1002 AMD, 0x19e5 Huawei)."""
    found = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    for entry in entries:
        vendor, klass = _read_hex(entry / "vendor"), _read_hex(entry / "class")
        if vendor == vendor_id and klass is not None and klass >> 8 in ACCELERATOR_CLASSES:
            found.append(entry.name)
    return found


def _read_hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None
