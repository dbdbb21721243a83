"""Recorded nvidia-smi / kernel-log outputs of three NVIDIA boxes, replayed into the backend.

fixtures/dgx_h100: 8 x H100 on NVSwitch (NV18 between every pair), one rail NIC per GPU plus
storage NICs, as in a multi-node DGX cluster. fixtures/mixed_pcie_nvlink: 8 x RTX A6000, NVLink
bridges on three pairs, the rest PCIe within a socket and SMP across. fixtures/failed_node:
8 x A100 SXM4 where GPU 2 fell off the bus (XID 79, "GPU is lost"), GPU 5 has uncorrectable ECC
errors and GPU 6 runs hot and throttled. fixtures/gb200_tray1 and gb200_tray2: two 4-GPU
compute trays of one GB200 NVL72 rack, in one multi-node NVLink domain; tray 2's GPU 3 reports
degraded fabric bandwidth.
"""

from __future__ import annotations

from pathlib import Path

from xirang_cuda import compat, fabric, smi, topo
from xirang_cuda.backend import CudaBackend

from xirang.devices.compat import TorchBuild
from xirang.devices.replay import ReplayRunner

FIXTURES = Path(__file__).parent / "fixtures"
FILES = {
    smi.LEGACY_QUERY: "query.csv",  # recorded with the field name drivers before 535 used
    smi.HEADER: "smi.txt",
    topo.COMMAND: "topo.txt",
    fabric.COMMAND: "q.txt",
    ("dmesg",): "dmesg.txt",
}
CUDA_BUILD = TorchBuild("2.5.1+cu124", "12.4", None)


def replay(box: str) -> ReplayRunner:
    return ReplayRunner.from_folder(FIXTURES / box, FILES)


def backend(box: str, sysfs: Path | None = None) -> CudaBackend:
    """The backend reading ``box``'s recordings; no sysfs unless given (no bus cross-check)."""
    return CudaBackend(runner=replay(box), sysfs_pci=sysfs or FIXTURES / "no-sysfs")


def as_cuda_host(
    monkeypatch, build: TorchBuild = CUDA_BUILD, gpus: int = 8, arch=("sm_80", "sm_90")
):
    """Pretend torch is a CUDA build that sees ``gpus`` GPUs of compute capability 9.0."""
    import xirang.devices.compat as shared

    seen = compat.TorchCuda(True, gpus, ((9, 0),) * gpus, tuple(arch))
    monkeypatch.setattr(shared, "torch_build", lambda: build)
    monkeypatch.setattr(compat, "torch_cuda", lambda: seen)
