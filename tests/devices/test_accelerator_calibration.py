"""The shared calibration path: matmul per dtype, memory and device-to-device bandwidth, cached
per (model, driver, torch). Run on the CPU here; on GPUs the same code runs on the device."""

from __future__ import annotations

import torch

from xirang.devices.accelerator import AcceleratorBackend
from xirang.devices.reading import DeviceReading, NodeReading


class TwoCpuDevices(AcceleratorBackend):
    """An accelerator family whose two 'devices' are the host CPU, sized to run in a moment."""

    type = "twocpu"
    torch_type = "cpu"
    vendor = "test"
    calibration_size = 64
    calibration_mbytes = 1
    calibration_seconds = 0.01

    def read(self) -> NodeReading:
        devices = tuple(DeviceReading(i, model="Test Accelerator X1") for i in range(2))
        return NodeReading("test", devices, driver="1.2.3")

    def torch_device(self, local_rank: int) -> torch.device:
        return torch.device("cpu")


def test_calibration_measures_every_figure_and_is_cached() -> None:
    backend = TwoCpuDevices()
    first = backend.calibrate()
    assert set(first.matmul_tflops) == {"float32", "float16", "bfloat16"}
    assert all(v > 0 for v in first.matmul_tflops.values())
    assert first.memory_bandwidth_gbps > 0 and first.link_bandwidth_gbps > 0
    assert "Test Accelerator X1" in first.key and "driver1.2.3" in first.key
    again = backend.calibrate()  # from the store: as it was, or measured again and the best kept
    assert again.key == first.key
    assert all(again.matmul_tflops[d] >= v for d, v in first.matmul_tflops.items())


def test_refresh_measures_again() -> None:
    backend = TwoCpuDevices()
    before = backend.calibrate()
    again = backend.calibrate(refresh=True)
    assert again.key == before.key and again.matmul_tflops.keys() == before.matmul_tflops.keys()


def test_calibration_runs_in_a_child_process(monkeypatch) -> None:
    """The launching process keeps no device context or calibration buffers: the measurement
    happens in a spawned child (a patch of this process's measuring code does not reach it)."""
    import xirang.devices.accelerator as accelerator

    def here(*args, **kwargs):
        raise AssertionError("calibration measured in the launching process")

    monkeypatch.setattr(accelerator, "measure_matmul_tflops", here)
    monkeypatch.setattr(accelerator, "measure_memory_bandwidth_gbps", here)
    found = TwoCpuDevices().calibrate(refresh=True)
    assert found.matmul_tflops["float32"] > 0 and found.memory_bandwidth_gbps > 0
