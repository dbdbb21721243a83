"""The shared severity rules: lost, ECC, temperature, throttling, devices missing from the bus."""

from __future__ import annotations

from pathlib import Path

from xirang.devices.health import (
    DRAIN,
    OK,
    WARN,
    HealthLimits,
    assess,
    missing_from_driver,
    worst,
)
from xirang.devices.pci import pci_devices
from xirang.devices.reading import DeviceReading


def test_a_healthy_device_gets_one_ok_finding() -> None:
    findings = assess([DeviceReading(0, temperature_c=40, ecc_corrected=0, ecc_uncorrected=0)])
    assert [(f.device, f.severity) for f in findings] == [(0, OK)]
    assert worst(findings) == OK


def test_a_lost_device_drains_and_hides_its_stale_counters() -> None:
    findings = assess([DeviceReading(3, lost="GPU is lost", temperature_c=99)])
    assert [(f.check, f.severity) for f in findings] == [("lost", DRAIN)]


def test_uncorrectable_ecc_drains_and_many_corrected_warn() -> None:
    limits = HealthLimits(ecc_corrected_warn=10)
    findings = assess([DeviceReading(1, ecc_corrected=12, ecc_uncorrected=1)], limits)
    assert sorted(f.severity for f in findings) == [DRAIN, WARN]
    assert worst(findings) == DRAIN


def test_vendor_thresholds_win_over_defaults() -> None:
    device = DeviceReading(
        0, temperature_c=80, temperature_slowdown_c=78, temperature_shutdown_c=90
    )
    assert worst(assess([device])) == WARN  # default slowdown is 85 C; this GPU's is 78 C
    hot = DeviceReading(0, temperature_c=88, temperature_shutdown_c=90)
    assert worst(assess([hot])) == DRAIN  # within the 3 C margin before shutdown


def test_throttling_warns() -> None:
    findings = assess([DeviceReading(0, throttle=("hardware thermal slowdown",))])
    assert [(f.check, f.severity) for f in findings] == [("throttle", WARN)]


def _sysfs(root: Path, devices: dict[str, tuple[str, str]]) -> Path:
    for bus, (vendor, klass) in devices.items():
        (root / bus).mkdir(parents=True)
        (root / bus / "vendor").write_text(vendor + "\n")
        (root / bus / "class").write_text(klass + "\n")
    return root


def test_a_gpu_on_the_bus_but_not_in_the_driver_drains(tmp_path: Path) -> None:
    root = _sysfs(
        tmp_path,
        {
            "0000:18:00.0": ("0x10de", "0x030200"),  # GPU
            "0000:2a:00.0": ("0x10de", "0x030200"),  # GPU the driver no longer lists
            "0000:05:00.0": ("0x10de", "0x068000"),  # NVSwitch: a bridge, not a GPU
            "0000:3b:00.0": ("0x8086", "0x030000"),  # another vendor's display
        },
    )
    on_bus = pci_devices(0x10DE, root)
    assert on_bus == ["0000:18:00.0", "0000:2a:00.0"]
    listed = [DeviceReading(0, pci_bus_id="00000000:18:00.0")]
    findings = missing_from_driver(on_bus, listed, "NVIDIA")
    assert [(f.severity, "0000:2a:00.0" in f.message) for f in findings] == [(DRAIN, True)]


def test_unreadable_sysfs_lists_nothing(tmp_path: Path) -> None:
    assert pci_devices(0x10DE, tmp_path / "absent") == []
