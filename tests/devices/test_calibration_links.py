"""Device-to-device bandwidth goes through the same timing code as the other measurements."""

from __future__ import annotations

import torch

from xirang.devices.calibration import measure_device_to_device_gbps


def test_copy_between_two_devices_reports_a_bandwidth() -> None:
    cpu = torch.device("cpu")
    assert measure_device_to_device_gbps(cpu, cpu, mbytes=1, seconds=0.01) > 0
