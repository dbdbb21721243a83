"""The host CPU as a xirang device (``device=cpu``): always present, gloo for collectives."""

from xirang import conf_folder, hookimpl
from xirang.specs import DeviceBackendSpec


@hookimpl
def xirang_device_backends() -> list[DeviceBackendSpec]:
    return [
        DeviceBackendSpec(
            name="cpu",
            target="xirang_cpu.backend:CpuBackend",
            description="host CPU; calibrated matmul FLOP/s and memory bandwidth",
            priority=0,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
