"""Read AMD GPUs through the amdsmi Python library (``pip install amdsmi``, ROCm 6.1 and later).

Every call a GPU or driver does not support raises ``AmdSmiLibraryException``; such fields are
left ``None`` so one unsupported counter never hides the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xirang.devices import DeviceReading, NodeReading, Sensor


def read(amdsmi: Any) -> NodeReading:
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # library present but no amdgpu driver loaded
        return NodeReading("amdsmi", problem=f"amdsmi could not start: {exc}")
    try:
        handles = amdsmi.amdsmi_get_processor_handles()
        devices = tuple(_device(amdsmi, i, h) for i, h in enumerate(handles))
        driver = _optional(amdsmi.amdsmi_get_gpu_driver_info, handles[0]) if handles else None
        return NodeReading(
            "amdsmi",
            devices,
            driver=str((driver or {}).get("driver_version", "")),
            problem="" if devices else "amdsmi lists no GPUs",
        )
    finally:
        _optional(amdsmi.amdsmi_shut_down)


def _device(amdsmi: Any, index: int, handle: Any) -> DeviceReading:
    asic = _optional(amdsmi.amdsmi_get_gpu_asic_info, handle)
    if asic is None:
        return DeviceReading(index=index, lost="amdsmi cannot read the GPU's ASIC information")
    ecc = _optional(amdsmi.amdsmi_get_gpu_total_ecc_count, handle) or {}
    temperature = _optional(
        amdsmi.amdsmi_get_temp_metric,
        handle,
        amdsmi.AmdSmiTemperatureType.HOTSPOT,
        amdsmi.AmdSmiTemperatureMetric.CURRENT,
    )
    gfx = asic.get("target_graphics_version", "")
    sensors = _sensors(amdsmi, handle)
    return DeviceReading(
        index=index,
        model=str(asic.get("market_name", "AMD GPU")),
        memory_bytes=_optional(
            amdsmi.amdsmi_get_gpu_memory_total, handle, amdsmi.AmdSmiMemoryType.VRAM
        )
        or 0,
        pci_bus_id=str(_optional(amdsmi.amdsmi_get_gpu_device_bdf, handle) or ""),
        uuid=str(_optional(amdsmi.amdsmi_get_gpu_device_uuid, handle) or ""),
        temperature_c=temperature,
        sensors=sensors,
        ecc_corrected=ecc.get("correctable_count"),
        ecc_uncorrected=ecc.get("uncorrectable_count"),
        extra={"gfx": str(gfx)} if gfx else {},
    )


#: amdsmi's sensor types, as the health rules name the sensors
SENSORS = {"EDGE": "edge", "HOTSPOT": "junction", "VRAM": "memory"}


def _sensors(amdsmi: Any, handle: Any) -> tuple[Sensor, ...]:
    """Every sensor's current temperature with its own critical (throttle) and emergency
    (shutdown) limits, as the driver reports them."""
    kinds, metrics = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric

    def metric(kind: Any, name: str) -> float | None:
        which = getattr(metrics, name, None)
        if which is None:
            return None
        return _optional(amdsmi.amdsmi_get_temp_metric, handle, kind, which)

    found = []
    for kind_name, name in SENSORS.items():
        kind = getattr(kinds, kind_name, None)
        current = metric(kind, "CURRENT") if kind is not None else None
        if current is not None:
            found.append(Sensor(name, current, metric(kind, "CRITICAL"), metric(kind, "EMERGENCY")))
    return tuple(found)


def _optional(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None
