"""Read NVIDIA GPUs through NVML (``pip install nvidia-ml-py``, imported as ``pynvml``).

NVML is what nvidia-smi itself calls; the library gives exact temperature thresholds per GPU and
avoids a subprocess. Any call a GPU does not support (``NVMLError_NotSupported``) is left ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xirang.devices import DeviceReading, NodeReading
from xirang_cuda.smi import THROTTLE_BITS


def read(nvml: Any) -> NodeReading:
    """The node as NVML reports it; a GPU whose handle fails is kept as lost, with NVML's words."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NodeReading("nvml", problem=f"NVML could not start: {exc}")
    try:
        count = nvml.nvmlDeviceGetCount()
        devices = tuple(_device(nvml, i) for i in range(count))
        cuda = _optional(nvml.nvmlSystemGetCudaDriverVersion)
        return NodeReading(
            "nvml",
            devices,
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
            runtime=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "",
            problem="" if count else "NVML lists no GPUs",
        )
    finally:
        _optional(nvml.nvmlShutdown)


def _device(nvml: Any, index: int) -> DeviceReading:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
    except Exception as exc:  # NVMLError_GpuIsLost, NVMLError_Unknown
        return DeviceReading(index=index, lost=str(exc) or type(exc).__name__)

    def call(fn: str, *args: Any) -> Any:
        method = getattr(nvml, fn, None)  # older bindings lack some calls: not supported
        return _optional(method, handle, *args) if method is not None else None

    ecc = (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    memory = call("nvmlDeviceGetMemoryInfo")
    pci = call("nvmlDeviceGetPciInfo")
    reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons") or 0
    milliwatts = call("nvmlDeviceGetPowerUsage")
    return DeviceReading(
        index=index,
        model=name,
        memory_bytes=int(memory.total) if memory else 0,
        pci_bus_id=_text(pci.busId) if pci else "",
        uuid=_text(call("nvmlDeviceGetUUID") or ""),
        temperature_c=call("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU),
        temperature_slowdown_c=call(
            "nvmlDeviceGetTemperatureThreshold", nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        temperature_shutdown_c=call(
            "nvmlDeviceGetTemperatureThreshold", nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        ),
        ecc_corrected=call("nvmlDeviceGetTotalEccErrors", ecc[0], nvml.NVML_VOLATILE_ECC),
        ecc_uncorrected=call("nvmlDeviceGetTotalEccErrors", ecc[1], nvml.NVML_VOLATILE_ECC),
        throttle=tuple(reason for bit, reason in THROTTLE_BITS.items() if reasons & bit),
        power_w=milliwatts / 1000 if milliwatts is not None else None,
        extra=_mig(nvml, handle),
    )


def _mig(nvml: Any, handle: Any) -> dict[str, tuple[str, ...]]:
    """``{"mig_uuids": (...)}`` of a GPU in MIG mode: the ``MIG-<uuid>`` names that
    CUDA_VISIBLE_DEVICES may give instead of the GPU's own (empty when MIG is off)."""
    if not hasattr(nvml, "nvmlDeviceGetMigMode"):
        return {}
    mode = _optional(nvml.nvmlDeviceGetMigMode, handle)
    if not mode or not mode[0]:
        return {}
    count = _optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    uuids = []
    for slot in range(count):
        mig = _optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        uuid = _optional(nvml.nvmlDeviceGetUUID, mig) if mig is not None else None
        if uuid:
            uuids.append(_text(uuid))
    return {"mig_uuids": tuple(uuids)} if uuids else {}


def _optional(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None where the GPU or driver does not support the query."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> str:
    """NVML returns bytes in older bindings and str in newer ones."""
    return value.decode() if isinstance(value, bytes) else str(value)
