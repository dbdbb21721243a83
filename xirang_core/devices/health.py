"""The severity model every device backend shares, and the health rules common to all vendors.

Severities are ordered: ``ok`` (use it), ``warn`` (usable, but an operator should look; the pool
keeps placing work) and ``drain`` (finish or checkpoint what runs, place nothing new, and evict:
the node needs a reset or a repair). Vendor-specific signals (NVIDIA XID codes, AMD RAS blocks,
Ascend alarm levels) are classified by their backend into the same three levels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xirang_core.devices.reading import DeviceReading, bus_key
from xirang_core.specs import HealthFinding

OK, WARN, DRAIN = "ok", "warn", "drain"
SEVERITIES = (OK, WARN, DRAIN)


@dataclass(frozen=True)
class HealthLimits:
    """Thresholds where a vendor reports none of its own.

    Corrected ECC errors are repaired by the hardware but a climbing count predicts an
    uncorrectable one; temperatures default to typical data-centre slowdown/shutdown points.
    """

    ecc_corrected_warn: int = 100
    temperature_warn_c: float = 85.0
    temperature_drain_c: float = 95.0
    #: drain this many degrees before the vendor's shutdown point: the device is about to stop
    shutdown_margin_c: float = 3.0


def worst(findings: Iterable[HealthFinding]) -> str:
    """The most severe level among ``findings`` (``ok`` when there are none)."""
    return max((f.severity for f in findings), key=SEVERITIES.index, default=OK)


def assess(
    devices: Iterable[DeviceReading], limits: HealthLimits | None = None
) -> list[HealthFinding]:
    """Findings for lost devices, ECC, temperature and throttling; one ``ok`` per healthy device."""
    limits = limits or HealthLimits()
    findings: list[HealthFinding] = []
    for device in devices:
        found = _assess_one(device, limits)
        findings.extend(found or [_healthy(device)])
    return findings


def _assess_one(device: DeviceReading, limits: HealthLimits) -> list[HealthFinding]:
    if device.lost:
        where = f" ({device.pci_bus_id})" if device.pci_bus_id else ""
        return [HealthFinding(device.index, "lost", DRAIN, f"device{where} is lost: {device.lost}")]
    return [*_ecc(device, limits), *_temperature(device, limits), *_throttle(device)]


def _ecc(device: DeviceReading, limits: HealthLimits) -> list[HealthFinding]:
    found = []
    if device.ecc_uncorrected:
        found.append(
            HealthFinding(
                device.index,
                "ecc",
                DRAIN,
                f"{device.ecc_uncorrected} uncorrectable ECC errors since the driver loaded; "
                "reset the device before placing work on it",
            )
        )
    if (device.ecc_corrected or 0) >= limits.ecc_corrected_warn:
        found.append(
            HealthFinding(
                device.index,
                "ecc",
                WARN,
                f"{device.ecc_corrected} corrected ECC errors "
                f"(warn at {limits.ecc_corrected_warn})",
            )
        )
    return found


def _temperature(device: DeviceReading, limits: HealthLimits) -> list[HealthFinding]:
    temp = device.temperature_c
    if temp is None:
        return []
    drain_at = (
        device.temperature_shutdown_c - limits.shutdown_margin_c
        if device.temperature_shutdown_c
        else limits.temperature_drain_c
    )
    warn_at = device.temperature_slowdown_c or limits.temperature_warn_c
    if temp >= drain_at:
        return [
            HealthFinding(
                device.index,
                "temperature",
                DRAIN,
                f"{temp:.0f} C, at most {drain_at:.0f} C allowed before shutdown",
            )
        ]
    if temp >= warn_at:
        return [
            HealthFinding(
                device.index,
                "temperature",
                WARN,
                f"{temp:.0f} C, at or above the {warn_at:.0f} C slowdown point",
            )
        ]
    return []


def _throttle(device: DeviceReading) -> list[HealthFinding]:
    if not device.throttle:
        return []
    return [
        HealthFinding(
            device.index, "throttle", WARN, "clocks held down by " + ", ".join(device.throttle)
        )
    ]


def _healthy(device: DeviceReading) -> HealthFinding:
    parts = []
    if device.temperature_c is not None:
        parts.append(f"{device.temperature_c:.0f} C")
    if device.ecc_uncorrected is not None:
        parts.append(f"{device.ecc_corrected or 0} corrected / 0 uncorrectable ECC")
    return HealthFinding(device.index, "device", OK, ", ".join(parts) or "reachable")


def missing_from_driver(
    pci_bus_ids: Iterable[str], devices: Iterable[DeviceReading], vendor: str
) -> list[HealthFinding]:
    """A drain finding per device on the PCI bus that the driver does not list at all.

    A GPU that has fallen off the bus often vanishes from the driver's list instead of showing as
    lost, so counting devices on the PCI bus is the only way to notice it.
    """
    listed = {bus_key(d.pci_bus_id) for d in devices if d.pci_bus_id}
    return [
        HealthFinding(
            None,
            "lost",
            DRAIN,
            f"{vendor} device {bus_id} is on the PCI bus but the driver does not list it",
        )
        for bus_id in pci_bus_ids
        if bus_key(bus_id) not in listed
    ]
