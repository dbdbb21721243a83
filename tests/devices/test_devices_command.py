"""``xirang devices``: unavailable backends say why; hardware torch cannot use is still listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from xirang_inventory import command as devices

from xirang.devices.replay import ReplayRunner

CUDA_FIXTURES = Path(__file__).parents[1] / "plugins" / "xirang_cuda" / "fixtures"


@pytest.fixture
def failed_cuda_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda backend sees the recorded failed A100 node instead of this machine."""
    from xirang_cuda import smi, topo
    from xirang_cuda.backend import CudaBackend

    files = {smi.LEGACY_QUERY: "query.csv", smi.HEADER: "smi.txt", topo.COMMAND: "topo.txt"}
    runner = ReplayRunner.from_folder(CUDA_FIXTURES / "failed_node", files)
    original = CudaBackend.__init__

    def replaying(self, *args, **kwargs) -> None:
        original(self, runner=runner, sysfs_pci=CUDA_FIXTURES / "no-sysfs")

    monkeypatch.setattr(CudaBackend, "__init__", replaying)


def _entry(report: list[dict], name: str) -> dict:
    return next(e for e in report if e["backend"] == name)


def test_backends_without_hardware_report_only_their_reason() -> None:
    report = devices.survey()
    for name in ("cuda", "rocm", "ascend"):
        entry = _entry(report, name)
        assert entry["present"] is False and "driver found" in entry["reason"]
        assert "devices" not in entry and "calibration" not in entry
    assert _entry(report, "cpu")["present"] is True


def test_gpus_next_to_a_cpu_only_torch_are_listed_with_health(failed_cuda_node) -> None:
    entry = _entry(devices.survey(), "cuda")
    assert entry["present"] is False and "CPU-only build" in entry["reason"]
    assert len(entry["devices"]) == 7
    assert {"device": 2, "check": "lost", "severity": "drain"}.items() <= next(
        h for h in entry["health"] if h["check"] == "lost"
    ).items()
    assert "calibration" not in entry  # measuring needs torch on the GPU


def test_text_output_keeps_severity_brackets(failed_cuda_node, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert devices.main([]) == 0
    out = capsys.readouterr().out
    assert "cuda: not available — torch" in out
    assert "health [drain] device 2 lost" in out
    assert "link nvlink0 (nvlink): devices 0,1,2,3,4,5,6,7" in out


def test_a_failing_probe_is_reported_not_raised(failed_cuda_node, monkeypatch) -> None:
    from xirang_cuda.backend import CudaBackend

    def broken(self):
        raise OSError("topology tool crashed")

    monkeypatch.setattr(CudaBackend, "topology", broken)
    entry = _entry(devices.survey(), "cuda")
    assert entry["errors"] == {"topology": "OSError: topology tool crashed"}
    assert entry["health"]
