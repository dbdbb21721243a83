"""Which torch.distributed backend a device type uses, and which it can use at all.

Backends are keyed by device type, not by library name: "hccl" is both Huawei Ascend's and Habana
Gaudi's library, and ROCm's RCCL answers to "nccl" in torch. A comm option may ask for another
backend than the device's own (gloo on CUDA, to debug); one the device cannot use is refused.
"""

from __future__ import annotations

import importlib

from xirang_core.errors import ConfigError

#: the backend each device type uses unless a comm option says otherwise
DEFAULT_BACKEND: dict[str, str] = {
    "cpu": "gloo",
    "cuda": "nccl",
    "rocm": "nccl",  # RCCL, registered in torch under the name nccl
    "ascend": "hccl",
    "hpu": "hccl",
}

#: every backend a device type's tensors can travel through
USABLE_BACKENDS: dict[str, tuple[str, ...]] = {
    "cpu": ("gloo", "mpi"),
    "cuda": ("nccl", "gloo", "mpi"),
    "rocm": ("nccl", "gloo", "mpi"),
    "ascend": ("hccl",),
    "hpu": ("hccl",),
}

#: modules that register a backend with torch when imported, per device type
_REGISTERING_MODULE: dict[tuple[str, str], str] = {
    ("hccl", "ascend"): "torch_npu",
    ("hccl", "hpu"): "habana_frameworks.torch.distributed.hccl",
}


def collective_backend(device_type: str, requested: str = "") -> str:
    """The backend for ``device_type``: ``requested`` when given and usable, else the default."""
    if device_type not in DEFAULT_BACKEND:
        raise ConfigError(
            f"no collective backend is known for device type '{device_type}'. "
            f"Known device types: {', '.join(sorted(DEFAULT_BACKEND))}"
        )
    name = {"rccl": "nccl"}.get(requested, requested) or DEFAULT_BACKEND[device_type]
    usable = USABLE_BACKENDS[device_type]
    if name not in usable:
        raise ConfigError(
            f"collective backend '{requested}' cannot carry {device_type} tensors. "
            f"Usable on {device_type}: {', '.join(usable)} (default {DEFAULT_BACKEND[device_type]})"
        )
    return name


def check_available(backend: str, device_type: str) -> None:
    """Refuse a backend this torch build cannot open, naming what to install."""
    import torch.distributed as dist

    module = _REGISTERING_MODULE.get((backend, device_type))
    if module is not None:
        try:
            importlib.import_module(module)
        except ImportError:
            raise ConfigError(
                f"collective backend {backend} on {device_type} needs the module '{module}', "
                f"which is not installed"
            ) from None
    if not dist.is_available() or not dist.is_backend_available(backend):
        raise ConfigError(
            f"collective backend {backend} is not available in this torch build "
            f"(torch {_torch_version()}); it is needed for {device_type} devices"
        )


def _torch_version() -> str:
    import torch

    return torch.__version__
