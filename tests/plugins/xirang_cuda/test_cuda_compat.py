"""Driver / CUDA runtime / torch build mismatches, each with the exact remedy."""

from __future__ import annotations

import pytest
from xirang_cuda.compat import NATIVE, NONE, PTX, TorchCuda, check, code_for

from xirang.devices.compat import TorchBuild
from xirang.devices.health import DRAIN, WARN
from xirang.devices.reading import DeviceReading, NodeReading
from xirang.devices.visible import cuda

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


def test_ptx_of_an_older_arch_runs_with_a_jit_warning() -> None:
    ptx = TorchCuda(True, 1, ((9, 0),), ("sm_80", "compute_80"))
    [finding] = check(_node("550.54.15", "12.4"), TorchBuild("2.5.1+cu124", "12.4", None), ptx)
    assert finding.severity == WARN and "JIT" in finding.message and finding.device == 0


def test_ptx_only_cannot_run_under_minor_version_compatibility() -> None:
    """A driver older than torch's CUDA minor runs cubins but refuses to JIT PTX."""
    ptx = TorchCuda(True, 1, ((9, 0),), ("sm_80", "compute_80"))
    build = TorchBuild("2.5.1+cu124", "12.4", None)
    findings = check(_node("535.161.08", "12.2"), build, ptx)
    assert [f.severity for f in findings] == [WARN, DRAIN]
    assert "cannot JIT PTX" in findings[1].message


#: torch 2.5's official cu124 wheel: cubins only, no PTX
OFFICIAL_CU124 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


@pytest.mark.parametrize(
    "model", ["NVIDIA L4", "NVIDIA L40S", "NVIDIA GeForce RTX 4090", "NVIDIA RTX 6000 Ada"]
)
def test_ada_gpus_run_the_official_wheels_sm86_cubins(model: str) -> None:
    """sm_89 is not in the official arch list, but sm_86 cubins run on any 8.x with x >= 6."""
    node = NodeReading("nvml", (DeviceReading(0, model=model),), "550.54.15", "12.4")
    seen = TorchCuda(True, 1, ((8, 9),), OFFICIAL_CU124)
    assert check(node, TorchBuild("2.5.1+cu124", "12.4", None), seen) == []


@pytest.mark.parametrize(
    ("device_cc", "archs", "expected"),
    [
        (89, ("sm_80", "sm_86"), NATIVE),  # same major, later minor
        (86, ("sm_89",), NONE),  # an earlier minor does not run a later minor's cubin
        (100, ("sm_90",), NONE),  # nor does another major
        (100, ("sm_90", "compute_90"), PTX),  # PTX JITs forward across majors
        (90, ("sm_90a",), NATIVE),  # arch-specific: that capability only
        (100, ("sm_90a", "compute_90a"), NONE),  # arch-specific PTX does not JIT forward
        (103, ("sm_100f",), NATIVE),  # family cubins run on the family's later members
        (87, ("sm_80", "sm_86"), NONE),  # Jetson Orin (integrated) runs no dGPU cubin
        (87, ("sm_87",), NATIVE),
        (120, ("sm_120", "compute_120"), NATIVE),
        (75, ("compute_80",), NONE),  # PTX never JITs backward
    ],
)
def test_cuda_binary_compatibility_rules(device_cc: int, archs: tuple, expected: str) -> None:
    assert code_for(device_cc, archs) == expected


def test_arch_findings_name_the_gpu_behind_each_torch_ordinal() -> None:
    """With CUDA_VISIBLE_DEVICES=1, cuda:0 is vendor GPU 1 (the A100), not GPU 0."""
    node = NodeReading(
        "nvml",
        (DeviceReading(0, model="NVIDIA H100"), DeviceReading(1, model="NVIDIA A100")),
        "550.54.15",
        "12.4",
    )
    seen = TorchCuda(True, 1, ((8, 0),), ("sm_90",))
    build = TorchBuild("2.5.1+cu124", "12.4", None)
    visible = cuda(node.devices, {"CUDA_VISIBLE_DEVICES": "1"})
    [finding] = check(node, build, seen, visible)
    assert "A100" in finding.message and finding.device == 1


def test_gpus_torch_cannot_see() -> None:
    [finding] = check(
        _node("550.54.15", "12.4"), TorchBuild("2.5.1+cu124", "12.4", None), TorchCuda()
    )
    assert finding.severity == DRAIN and "CUDA_VISIBLE_DEVICES" in finding.message


def test_a_gpu_only_ptx_covers_is_a_start_up_caveat(monkeypatch) -> None:
    """The run prints the backend's caveats at start-up: JIT on first use is one of them."""
    from cuda_replay import as_cuda_host, backend

    as_cuda_host(monkeypatch, arch=("sm_80", "compute_80"))
    [caveat] = backend("dgx_h100").caveats()  # one line for the eight alike GPUs
    assert caveat.startswith("GPU 0-7 (NVIDIA H100 80GB HBM3) is sm_90") and "JIT" in caveat
