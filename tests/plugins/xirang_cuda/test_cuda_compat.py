"""Driver / CUDA runtime / torch build mismatches, each with the exact remedy."""

from __future__ import annotations

from xirang_cuda.compat import TorchCuda, check

from xirang_core.devices.compat import TorchBuild
from xirang_core.devices.health import DRAIN, WARN
from xirang_core.devices.reading import DeviceReading, NodeReading

H100 = (DeviceReading(0, model="NVIDIA H100 80GB HBM3"),)
SEES_H100 = TorchCuda(True, 1, ((9, 0),), ("sm_80", "sm_90"))


def _node(driver: str, cuda: str) -> NodeReading:
    return NodeReading("nvidia-smi", H100, driver=driver, runtime=cuda)


def test_rocm_torch_on_an_nvidia_host() -> None:
    [finding] = check(
        _node("550.54.15", "12.4"), TorchBuild("2.5.1+rocm6.2", None, "6.2.4"), TorchCuda()
    )
    assert finding.severity == DRAIN
    assert "ROCm build" in finding.message and "whl/cu124" in finding.message


def test_cpu_torch_names_the_wheel_the_driver_can_run() -> None:
    [finding] = check(_node("535.161.08", "12.2"), TorchBuild("2.5.1+cpu", None, None), TorchCuda())
    assert "CPU-only" in finding.message and "whl/cu121" in finding.message


def test_driver_too_old_for_the_runtime_major() -> None:
    build = TorchBuild("2.5.1+cu124", "12.4", None)
    [finding] = check(_node("470.199.02", "11.4"), build, SEES_H100)
    assert finding.severity == DRAIN
    assert ">= 525.60.13" in finding.message and "CUDA 11.4" in finding.message


def test_older_minor_runs_with_a_caveat() -> None:
    build = TorchBuild("2.5.1+cu124", "12.4", None)
    findings = check(_node("535.161.08", "12.2"), build, SEES_H100)
    assert [f.severity for f in findings] == [WARN]
    assert "minor-version compatibility" in findings[0].message


def test_torch_without_kernels_for_the_gpu() -> None:
    old = TorchCuda(True, 1, ((9, 0),), ("sm_50", "sm_60", "sm_70", "sm_80"))
    [finding] = check(_node("550.54.15", "12.4"), TorchBuild("2.0.0+cu118", "11.8", None), old)
    assert finding.severity == DRAIN and "sm_90" in finding.message


def test_ptx_of_an_older_arch_still_runs() -> None:
    ptx = TorchCuda(True, 1, ((9, 0),), ("sm_80", "compute_80"))
    assert check(_node("550.54.15", "12.4"), TorchBuild("2.5.1+cu124", "12.4", None), ptx) == []


def test_gpus_torch_cannot_see() -> None:
    [finding] = check(
        _node("550.54.15", "12.4"), TorchBuild("2.5.1+cu124", "12.4", None), TorchCuda()
    )
    assert finding.severity == DRAIN and "CUDA_VISIBLE_DEVICES" in finding.message
