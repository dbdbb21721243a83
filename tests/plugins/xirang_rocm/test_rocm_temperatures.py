"""AMD temperatures against each sensor's own limits: a junction (hotspot) sensor runs in the
90s when busy, so the generic 85/95 C (meant for one edge-like figure) would drain healthy GPUs.

The sysfs tree below is written by hand in the layout the amdgpu driver uses
(``hwmon/hwmon*/temp<N>_{label,crit,emergency}`` in millidegrees; Linux kernel docs, amdgpu
thermal); the limits are those an MI300X-class card reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from xirang_rocm import amdsmi_reader, smi
from xirang_rocm.backend import RocmBackend

from xirang.devices.health import DRAIN, OK, WARN, assess
from xirang.devices.replay import ReplayRunner

BUS = "0000:0c:00.0"
#: label -> (critical, emergency) in millidegrees
LIMITS = {"edge": (100_000, 105_000), "junction": (110_000, 115_000), "mem": (95_000, 105_000)}


def _sysfs(root: Path) -> Path:
    hwmon = root / BUS / "hwmon" / "hwmon3"
    hwmon.mkdir(parents=True)
    for n, (label, (crit, emergency)) in enumerate(LIMITS.items(), start=1):
        (hwmon / f"temp{n}_label").write_text(f"{label}\n")
        (hwmon / f"temp{n}_crit").write_text(f"{crit}\n")
        (hwmon / f"temp{n}_emergency").write_text(f"{emergency}\n")
    return root


def _backend(tmp_path: Path, edge: float, junction: float, memory: float) -> RocmBackend:
    card = {
        "Card Series": "AMD Instinct MI300X",
        "PCI Bus": BUS,
        "Temperature (Sensor edge) (C)": f"{edge}",
        "Temperature (Sensor junction) (C)": f"{junction}",
        "Temperature (Sensor memory) (C)": f"{memory}",
    }
    (tmp_path / "smi.json").write_text(json.dumps({"card0": card}))
    runner = ReplayRunner.from_folder(tmp_path, {smi.QUERY: "smi.json"})
    return RocmBackend(runner=runner, sysfs_pci=_sysfs(tmp_path / "sys"), rocm_path=tmp_path)


def _temperature(backend: RocmBackend):
    findings = assess(backend.read().devices)
    return next(((f.severity, f.message) for f in findings if f.check == "temperature"), (OK, ""))


def test_a_busy_junction_in_the_90s_is_healthy(tmp_path: Path) -> None:
    assert _temperature(_backend(tmp_path, 70, 97, 85)) == (OK, "")


def test_junction_drains_near_its_own_emergency_point(tmp_path: Path) -> None:
    assert _temperature(_backend(tmp_path, 70, 113, 85)) == (
        DRAIN,
        "junction 113 C, at most 112 C allowed before shutdown",
    )


def test_hbm_warns_at_its_own_critical_point(tmp_path: Path) -> None:
    severity, message = _temperature(_backend(tmp_path, 70, 97, 96))
    assert severity == WARN and message.startswith("memory 96 C")


def test_amdsmi_gives_each_sensor_its_limits() -> None:
    table = {  # (sensor, metric) -> degrees C
        (0, "c"): 71, (0, "crit"): 100, (0, "emerg"): 105,
        (1, "c"): 98, (1, "crit"): 110, (1, "emerg"): 115,
        (2, "c"): 88, (2, "crit"): 95, (2, "emerg"): 105,
    }  # fmt: skip
    amd = SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_gpu_asic_info=lambda h: {"market_name": "AMD Instinct MI300X"},
        amdsmi_get_gpu_total_ecc_count=lambda h: {},
        amdsmi_get_temp_metric=lambda h, kind, metric: table[(kind, metric)],
        amdsmi_get_gpu_memory_total=lambda h, kind: 0,
        amdsmi_get_gpu_device_bdf=lambda h: BUS,
        amdsmi_get_gpu_device_uuid=lambda h: "",
        amdsmi_get_gpu_driver_info=lambda h: {},
        AmdSmiTemperatureType=SimpleNamespace(EDGE=0, HOTSPOT=1, VRAM=2),
        AmdSmiTemperatureMetric=SimpleNamespace(CURRENT="c", CRITICAL="crit", EMERGENCY="emerg"),
        AmdSmiMemoryType=SimpleNamespace(VRAM=0),
    )
    [gpu] = amdsmi_reader.read(amd).devices
    assert [f.severity for f in assess([gpu])] == [OK]  # hotspot 98 C of 110/115: fine
