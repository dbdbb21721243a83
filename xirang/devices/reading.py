"""A vendor-neutral snapshot of one node's accelerators, as a vendor library or tool reports it.

Every backend reads its devices from two possible sources (the vendor's Python library, else its
command-line tool); both are translated into these records so inventory and the health rules are
written once, whichever source answered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xirang_core.specs import DeviceInfo


@dataclass(frozen=True)
class Sensor:
    """One temperature sensor of a device with the vendor's own limits for it (None: the
    source did not say). AMD GPUs report several (``edge``, ``junction`` (hotspot),
    ``memory``), each with its own critical (throttling) and emergency (shutdown) point."""

    name: str
    current_c: float
    slowdown_c: float | None = None
    shutdown_c: float | None = None


@dataclass(frozen=True)
class DeviceReading:
    """One device's identity and health counters; ``None`` means the source did not say."""

    index: int
    model: str = ""
    memory_bytes: int = 0
    pci_bus_id: str = ""
    uuid: str = ""
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    temperature_shutdown_c: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    throttle: tuple[str, ...] = ()
    lost: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: power drawn now, in watts (cost metering prefers it to configured watts)
    power_w: float | None = None
    #: every temperature sensor with its limits; when given, health judges these instead of
    #: ``temperature_c`` (which stays the one figure shown)
    sensors: tuple[Sensor, ...] = ()

    def info(self, device_type: str, driver: str, runtime: str) -> DeviceInfo:
        """The inventory record the core and the pool consume."""
        return DeviceInfo(
            type=device_type,
            index=self.index,
            model=self.model,
            memory_bytes=self.memory_bytes,
            driver=driver,
            runtime=runtime,
            pci_bus_id=self.pci_bus_id,
            extra={"uuid": self.uuid, **self.extra} if self.uuid else dict(self.extra),
        )


@dataclass(frozen=True)
class NodeReading:
    """Everything one source said about this node; ``problem`` says why it said nothing."""

    source: str
    devices: tuple[DeviceReading, ...] = ()
    driver: str = ""
    runtime: str = ""
    problem: str = ""

    @property
    def usable(self) -> tuple[DeviceReading, ...]:
        """Devices the driver can still reach (lost ones are reported by health, not used)."""
        return tuple(d for d in self.devices if not d.lost)


_BUS_ID = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
)


def bus_key(bus_id: str) -> str:
    """``domain:bus:device`` in one spelling, so ids from different tools compare equal.

    nvidia-smi writes ``00000000:3B:00.0``, the kernel log ``PCI:0000:3b:00`` and sysfs
    ``0000:3b:00.0``; all three become ``0000:3b:00``.
    """
    match = _BUS_ID.search(bus_id.removeprefix("PCI:"))
    if not match:
        return bus_id.strip().lower()
    domain = int(match["domain"] or "0", 16)
    return f"{domain:04x}:{match['bus'].lower()}:{match['dev'].lower()}"


def parse_int(text: str | None) -> int | None:
    """An integer field of a tool's output; ``[N/A]``, ``N/A`` and blanks are None."""
    value = parse_float(text)
    return None if value is None else int(value)


def parse_float(text: str | None) -> float | None:
    """A float field of a tool's output (units after a space are ignored); None when absent."""
    match = re.match(r"\s*([-+]?\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None
