"""Huawei Ascend NPUs as a xirang device (``device=ascend``): npu-smi and torch_npu, HCCL."""

from xirang import conf_folder, hookimpl
from xirang.specs import DeviceBackendSpec


@hookimpl
def xirang_device_backends() -> list[DeviceBackendSpec]:
    return [
        DeviceBackendSpec(
            name="ascend",
            target="xirang_ascend.backend:AscendBackend",
            description="Huawei Ascend NPUs: npu-smi inventory, HCCS topology, alarm health",
            # torch_npu is needed to train, not to list: npu-smi inventories without it
            install="pip install 'xirang[ascend]'  (torch-npu matching your torch version)",
            priority=10,
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
