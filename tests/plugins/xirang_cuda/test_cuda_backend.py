"""The cuda backend as the core uses it: detect, inventory, torch device, registration."""

from __future__ import annotations

import pytest
from cuda_replay import as_cuda_host, backend
from xirang_cuda.backend import CudaBackend

from xirang.devices.tools import ToolOutput
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.specs import DeviceBackend


def test_detects_a_dgx_when_torch_is_a_cuda_build(monkeypatch) -> None:
    as_cuda_host(monkeypatch)
    present, why = backend("dgx_h100").detect()
    assert present and why.startswith("8 x NVIDIA H100 80GB HBM3")


def test_cpu_only_torch_is_the_reason_given(monkeypatch) -> None:
    present, why = backend("dgx_h100").detect()  # the torch installed here is CPU-only
    assert not present and "CPU-only build" in why


def test_no_driver_and_no_library(monkeypatch) -> None:
    present, why = backend("nothing-recorded").detect()
    assert not present
    assert why == "no NVIDIA driver found (nvidia-smi not found on PATH; pynvml not installed)"


def test_detect_never_raises() -> None:
    def broken(argv):
        raise RuntimeError("driver hung")

    present, why = CudaBackend(runner=broken).detect()
    assert not present and "RuntimeError: driver hung" in why


def test_all_gpus_lost_is_not_usable(monkeypatch) -> None:
    lost = "Unable to determine the device handle for GPU0000:47:00.0: GPU is lost.\n"
    runner = lambda argv: ToolOutput(tuple(argv), lost, "nvidia-smi exited 15: GPU is lost")  # noqa: E731
    present, why = CudaBackend(runner=runner).detect()
    assert not present and why == "all 1 NVIDIA devices are lost"


def test_inventory_leaves_lost_gpus_out(monkeypatch) -> None:
    devices = backend("failed_node").inventory()
    assert [d.index for d in devices] == [0, 1, 3, 4, 5, 6, 7]
    assert {d.driver for d in devices} == {"535.161.08"}


def test_torch_device_beyond_what_torch_sees_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"local rank 0 needs cuda:0.*CUDA_VISIBLE_DEVICES"):
        CudaBackend().torch_device(0)


def test_calibrating_without_gpus_says_why() -> None:
    with pytest.raises(ConfigError, match="nothing to calibrate: no NVIDIA driver found"):
        backend("nothing-recorded").calibrate()


def test_registered_above_cpu_without_hard_requirements() -> None:
    registry = get_registry()
    spec = registry.spec("device", "cuda")
    assert spec.priority > registry.spec("device", "cpu").priority
    assert spec.requires == ()  # nvidia-smi works without nvidia-ml-py
    instance = registry.create("device", {"name": "cuda"})
    assert isinstance(instance, DeviceBackend)
    assert instance.collective_backend() == "nccl"
