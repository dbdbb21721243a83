"""``comm=gloo|nccl|rccl|hccl``: plain averaged all-reduce over a named collective backend.

Each pins its backend and the device types it can serve; the gradient exchange is the base
class's counted all-reduce, so even the plain options report bytes and hidden communication.
"""

from __future__ import annotations

from xirang_comm.base import GradientSync


class Gloo(GradientSync):
    name = "gloo"
    pinned_backend = "gloo"
    device_types = ("cpu", "cuda", "rocm")


class Nccl(GradientSync):
    name = "nccl"
    pinned_backend = "nccl"
    device_types = ("cuda", "rocm")


class Rccl(GradientSync):
    """AMD's RCCL; torch registers it under the name ``nccl``."""

    name = "rccl"
    pinned_backend = "nccl"
    device_types = ("rocm",)


class Hccl(GradientSync):
    """Huawei Ascend's HCCL (through torch_npu)."""

    name = "hccl"
    pinned_backend = "hccl"
    device_types = ("ascend",)
