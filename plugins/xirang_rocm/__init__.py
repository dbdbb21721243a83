"""AMD GPUs as a xirang device (``device=rocm``): amdsmi or rocm-smi, RCCL for collectives."""

from xirang import conf_folder, hookimpl
from xirang.specs import DeviceBackendSpec


@hookimpl
def xirang_device_backends() -> list[DeviceBackendSpec]:
    return [
        DeviceBackendSpec(
            name="rocm",
            target="xirang_rocm.backend:RocmBackend",
            description="AMD GPUs: amdsmi/rocm-smi inventory, xGMI topology, RAS/ECC health",
            # amdsmi is optional: rocm-smi answers the same questions without it
            install="pip install 'xirang[rocm]'  (amdsmi; optional, rocm-smi suffices)",
            priority=20,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
