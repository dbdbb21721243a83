"""NVIDIA GPUs as a xirang device (``device=cuda``): NVML or nvidia-smi, NCCL for collectives."""

from xirang import conf_folder, hookimpl
from xirang.specs import DeviceBackendSpec


@hookimpl
def xirang_device_backends() -> list[DeviceBackendSpec]:
    return [
        DeviceBackendSpec(
            name="cuda",
            target="xirang_cuda.backend:CudaBackend",
            description="NVIDIA GPUs: NVML/nvidia-smi inventory, NVLink topology, XID/ECC health",
            # nvidia-ml-py is optional: nvidia-smi answers the same questions without it
            install="pip install 'xirang[cuda]'  (nvidia-ml-py; optional, nvidia-smi suffices)",
            priority=30,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
