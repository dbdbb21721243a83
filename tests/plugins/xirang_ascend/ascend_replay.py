"""Recorded npu-smi outputs of two Ascend boxes, replayed into the backend.

fixtures/atlas_800t_a2: 8 x Ascend 910B3 with HCCS between every pair, all healthy.
fixtures/atlas_800_9000_faulty: 8 x Ascend 910 in two HCCS rings of four joined across sockets,
where NPU 2 reports a Warning at 88 C and NPU 5 a Critical alarm.
"""

from __future__ import annotations

from pathlib import Path

from xirang_ascend import compat, smi, topo
from xirang_ascend.backend import AscendBackend

from xirang.devices.compat import TorchBuild
from xirang.devices.replay import ReplayRunner

FIXTURES = Path(__file__).parent / "fixtures"
FILES = {smi.COMMAND: "npu-smi.txt", topo.COMMAND: "topo.txt"}


def backend(box: str) -> AscendBackend:
    runner = ReplayRunner.from_folder(FIXTURES / box, FILES)
    return AscendBackend(runner=runner, sysfs_pci=FIXTURES / "no-sysfs")


def with_torch_npu(monkeypatch, version: str = "2.1.0.post3", torch: str = "2.1.0") -> None:
    """Pretend torch ``torch`` and torch_npu ``version`` are installed and see 8 NPUs."""
    import xirang_ascend.backend as module

    import xirang.devices.compat as shared

    monkeypatch.setattr(shared, "torch_build", lambda: TorchBuild(torch, None, None))
    monkeypatch.setattr(module, "torch_npu_view", lambda: compat.TorchNpu(version, "", True, 8))
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest")
