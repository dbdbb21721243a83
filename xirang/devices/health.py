"""The severity model every device backend shares, and the health rules common to all vendors.

Severities are ordered: ``ok`` (use it), ``warn`` (usable, but an operator should look; the pool
keeps placing work) and ``drain`` (finish or checkpoint what runs, place nothing new, and evict:
the node needs a reset or a repair). Vendor-specific signals (NVIDIA XID codes, AMD RAS blocks,
Ascend alarm levels) are classified by their backend into the same three levels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from xirang.devices.reading import DeviceReading, Sensor, bus_key
from xirang_core.specs import HealthFinding

OK, WARN, DRAIN = "ok", "warn", "drain"
SEVERITIES = (OK, WARN, DRAIN)


@dataclass(frozen=True)
class HealthLimits:
    """Thresholds where a vendor reports none of its own.

    Corrected ECC errors are repaired by the hardware but a climbing count predicts an
    uncorrectable one; temperatures default to typical data-centre slowdown/shutdown points.
    A named sensor without limits of its own takes ``sensor_limits``: a junction (hotspot)
    sensor runs in the 90s when busy and amdgpu's usual critical/emergency points are 110/115
    C for it and 105/110 C for HBM, so the edge figures would drain a healthy GPU.
    """

    ecc_corrected_warn: int = 100
    temperature_warn_c: float = 85.0
    temperature_drain_c: float = 95.0
    #: drain this many degrees before the vendor's shutdown point: the device is about to stop
    shutdown_margin_c: float = 3.0
    #: sensor name -> (slowdown, shutdown) where the source gives none for that sensor
    sensor_limits: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {"junction": (110.0, 115.0), "memory": (105.0, 110.0)}
    )


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
    """The worst finding over the device's sensors, each against its own limits."""
    sensors = device.sensors
    if not sensors and device.temperature_c is not None:
        sensors = (
            Sensor(
                "",
                device.temperature_c,
                device.temperature_slowdown_c,
                device.temperature_shutdown_c,
            ),
        )
    found = [f for s in sensors for f in _sensor(device.index, s, limits)]
    drains = [f for f in found if f.severity == DRAIN]
    return (drains or found)[:1]


def _sensor(index: int, sensor: Sensor, limits: HealthLimits) -> list[HealthFinding]:
    slowdown, shutdown = limits.sensor_limits.get(sensor.name, (None, None))
    if sensor.shutdown_c:
        drain_at = sensor.shutdown_c - limits.shutdown_margin_c
    elif shutdown:
        drain_at = shutdown - limits.shutdown_margin_c
    else:
        drain_at = limits.temperature_drain_c
    warn_at = sensor.slowdown_c or slowdown or limits.temperature_warn_c
    temp, name = sensor.current_c, f"{sensor.name} " if sensor.name else ""
    if temp >= drain_at:
        message = f"{name}{temp:.0f} C, at most {drain_at:.0f} C allowed before shutdown"
        return [HealthFinding(index, "temperature", DRAIN, message)]
    if temp >= warn_at:
        message = f"{name}{temp:.0f} C, at or above the {warn_at:.0f} C slowdown point"
        return [HealthFinding(index, "temperature", WARN, message)]
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
