"""Power readings through NVML (recorded answers, as nvidia-ml-py gives them: milliwatts):
what cost metering prefers to a configured ``cost.watts``."""

from __future__ import annotations

from cuda_replay import replay
from test_cuda_nvml import fake_nvml
from xirang_cuda import nvml
from xirang_cuda.backend import CudaBackend


def with_power(milliwatts: dict[int, int]):
    """The two-H100 NVML fake, now answering nvmlDeviceGetPowerUsage for some GPUs."""
    fake = fake_nvml()

    def power(handle: int) -> int:
        if handle not in milliwatts:
            raise RuntimeError("Not Supported")
        return milliwatts[handle]

    fake.nvmlDeviceGetPowerUsage = power
    return fake


def test_nvml_power_usage_is_read_in_watts() -> None:
    node = nvml.read(with_power({0: 612_500, 1: 598_000}))
    assert [d.power_w for d in node.devices] == [612.5, 598.0]


def test_a_gpu_without_a_power_reading_has_none() -> None:
    assert [d.power_w for d in nvml.read(with_power({1: 300_000})).devices] == [None, 300.0]
    assert [d.power_w for d in nvml.read(fake_nvml()).devices] == [None, None]  # old binding


def test_the_backend_reports_power_per_device_index(monkeypatch) -> None:
    import xirang_cuda.backend as module

    monkeypatch.setattr(module, "import_optional", lambda name: with_power({0: 700_000}))
    assert CudaBackend(runner=replay("dgx_h100")).power_watts() == {0: 700.0}
