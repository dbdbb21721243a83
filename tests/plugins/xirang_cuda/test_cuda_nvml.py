"""The NVML path translates the library's answers (and its failures) into the same readings."""

from __future__ import annotations

from types import SimpleNamespace

from cuda_replay import replay
from xirang_cuda import nvml
from xirang_cuda.backend import CudaBackend

from xirang.devices.health import DRAIN, assess


class GpuIsLost(Exception):
    def __str__(self) -> str:
        return "GPU is lost"


def fake_nvml(lost: set[int] = frozenset(), fail_init: bool = False) -> SimpleNamespace:
    """Two H100s as nvidia-ml-py would report them; ``lost`` ones fail to give a handle."""

    def init() -> None:
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def handle(i: int) -> int:
        if i in lost:
            raise GpuIsLost()
        return i

    def not_supported(*args):
        raise RuntimeError("Not Supported")

    return SimpleNamespace(
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlSystemGetDriverVersion=lambda: b"550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=85520809984),
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0"),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetTemperature=lambda h, sensor: 40 + h,
        nvmlDeviceGetTemperatureThreshold=lambda h, kind: {1: 87, 0: 92}[kind],
        nvmlDeviceGetTotalEccErrors=lambda h, kind, counter: 0,
        nvmlDeviceGetCurrentClocksThrottleReasons=not_supported,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_TEMPERATURE_GPU=0,
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1,
        NVML_TEMPERATURE_THRESHOLD_SHUTDOWN=0,
    )


def test_nvml_reading() -> None:
    node = nvml.read(fake_nvml())
    assert (node.source, node.driver, node.runtime) == ("nvml", "550.54.15", "12.4")
    second = node.devices[1]
    assert (second.pci_bus_id, second.temperature_c, second.throttle) == (
        "00000000:19:00.0",
        41,
        (),
    )
    assert (second.temperature_slowdown_c, second.temperature_shutdown_c) == (87, 92)


def test_a_lost_handle_is_a_lost_device() -> None:
    node = nvml.read(fake_nvml(lost={0}))
    assert node.devices[0].lost == "GPU is lost"
    assert assess(node.devices)[0].severity == DRAIN


def test_backend_prefers_nvml_and_falls_back_to_nvidia_smi(monkeypatch) -> None:
    import xirang_cuda.backend as module

    monkeypatch.setattr(module, "import_optional", lambda name: fake_nvml())
    assert CudaBackend(runner=replay("dgx_h100")).read().source == "nvml"
    monkeypatch.setattr(module, "import_optional", lambda name: fake_nvml(fail_init=True))
    node = CudaBackend(runner=replay("dgx_h100")).read()
    assert node.source == "nvidia-smi" and len(node.devices) == 8
