"""Per-sensor temperature limits of AMD GPUs from the amdgpu driver's hwmon files in sysfs.

rocm-smi's JSON gives each sensor's current temperature only. The driver exposes, per GPU
(``/sys/bus/pci/devices/<bdf>/hwmon/hwmon*/``), ``temp<N>_label`` (``edge``, ``junction``,
``mem``), ``temp<N>_input``, ``temp<N>_crit`` (where it throttles) and ``temp<N>_emergency``
(where the ASIC shuts down), in millidegrees Celsius (Linux kernel docs: amdgpu thermal).
"""

from __future__ import annotations

from pathlib import Path

from xirang.devices import Sensor

#: the driver's labels as the health rules name the sensors
NAMES = {"edge": "edge", "junction": "junction", "mem": "memory"}


def limits(sysfs_pci: Path, bus_id: str) -> dict[str, tuple[float | None, float | None]]:
    """``{sensor: (critical, emergency)}`` for the GPU at ``bus_id`` (empty when unreadable)."""
    found: dict[str, tuple[float | None, float | None]] = {}
    for folder in sorted(Path(sysfs_pci, _sysfs_name(bus_id)).glob("hwmon/hwmon*")):
        for label_file in sorted(folder.glob("temp*_label")):
            stem = label_file.name.removesuffix("_label")
            name = NAMES.get(_read(label_file) or "")
            if name:
                found[name] = (
                    _millidegrees(folder / f"{stem}_crit"),
                    _millidegrees(folder / f"{stem}_emergency"),
                )
    return found


def with_limits(
    sensors: tuple[Sensor, ...], known: dict[str, tuple[float | None, float | None]]
) -> tuple[Sensor, ...]:
    """``sensors`` with the limits hwmon reports for each, where they had none of their own."""
    found = []
    for sensor in sensors:
        critical, emergency = known.get(sensor.name, (None, None))
        slowdown, shutdown = sensor.slowdown_c or critical, sensor.shutdown_c or emergency
        found.append(Sensor(sensor.name, sensor.current_c, slowdown, shutdown))
    return tuple(found)


def _sysfs_name(bus_id: str) -> str:
    """rocm-smi's ``0000:c1:00.0`` as sysfs names the device (lowercase, with the domain)."""
    text = bus_id.strip().lower()
    return text if text.count(":") == 2 else f"0000:{text}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _millidegrees(path: Path) -> float | None:
    text = _read(path)
    return int(text) / 1000 if text and text.lstrip("-").isdigit() else None
