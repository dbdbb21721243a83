"""``device=auto`` prefers accelerators over the CPU, in backend priority order."""

from __future__ import annotations

import pytest

from xirang_core.devices.choice import pick_device
from xirang_core.plugins import get_registry


def _present(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    from xirang_ascend.backend import AscendBackend
    from xirang_cuda.backend import CudaBackend
    from xirang_rocm.backend import RocmBackend

    classes = {"cuda": CudaBackend, "rocm": RocmBackend, "ascend": AscendBackend}
    for name in names:
        monkeypatch.setattr(classes[name], "detect", lambda self: (True, "found"))


def test_without_accelerators_auto_is_the_cpu() -> None:
    assert pick_device(get_registry()) == "cpu"


@pytest.mark.parametrize(
    ("present", "chosen"),
    [(("ascend",), "ascend"), (("rocm", "ascend"), "rocm"), (("cuda", "rocm", "ascend"), "cuda")],
)
def test_the_highest_priority_accelerator_present_wins(monkeypatch, present, chosen) -> None:
    _present(monkeypatch, *present)
    assert pick_device(get_registry()) == chosen


def test_a_present_gpu_that_cannot_be_used_is_one_warning_line(monkeypatch, caplog) -> None:
    """device=auto may fall back to the CPU, but never silently past GPUs that are there."""
    from xirang_cuda.backend import CudaBackend

    why = "GPU 0 (NVIDIA B200) is sm_100, which torch 2.3.0 has no kernels for"
    monkeypatch.setattr(CudaBackend, "detect", lambda self: (False, why))
    monkeypatch.setattr(CudaBackend, "present", lambda self: (True, ""))
    with caplog.at_level("WARNING", logger="xirang.devices"):
        assert pick_device(get_registry()) == "cpu"
    [line] = [r.getMessage() for r in caplog.records if r.name == "xirang.devices"]
    assert "cuda" in line and "present but not usable" in line and why in line
