"""Recorded rocm-smi / kernel-log outputs of three AMD boxes, replayed into the backend.

fixtures/mi300x: 8 x MI300X, xGMI between every pair, two NUMA nodes. fixtures/mi210_mixed:
8 x MI210 with xGMI bridges on three pairs, PCIe otherwise, four GPUs per socket.
fixtures/failed_node: 4 x MI250X where GPU 2 has uncorrectable HBM (UMC) errors and runs at
97 C, and GPU 3's rings timed out and were reset.
"""

from __future__ import annotations

from pathlib import Path

from xirang_rocm import compat, ras, smi, topo
from xirang_rocm.backend import RocmBackend

from xirang.devices.compat import TorchBuild
from xirang.devices.replay import ReplayRunner

FIXTURES = Path(__file__).parent / "fixtures"
FILES = {
    smi.QUERY: "smi.json",
    topo.COMMAND: "topo.txt",
    ras.COMMAND: "ras.txt",
    ("dmesg",): "dmesg.txt",
}
ROCM_BUILD = TorchBuild("2.5.1+rocm6.2", None, "6.2.41133-dd7f95766")


def backend(box: str) -> RocmBackend:
    """The backend reading ``box``'s recordings; its ROCm release from fixtures/<box>/version."""
    runner = ReplayRunner.from_folder(FIXTURES / box, FILES)
    return RocmBackend(runner=runner, sysfs_pci=FIXTURES / "no-sysfs", rocm_path=FIXTURES / box)


def as_rocm_host(monkeypatch, arch=("gfx90a", "gfx942"), gpus: int = 8) -> None:
    import xirang.devices.compat as shared

    monkeypatch.setattr(shared, "torch_build", lambda: ROCM_BUILD)
    monkeypatch.setattr(compat, "torch_rocm", lambda: compat.TorchRocm(True, gpus, tuple(arch)))
