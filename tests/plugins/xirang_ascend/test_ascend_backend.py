"""Ascend boxes on recorded npu-smi output: inventory, HCCS topology, alarms, compatibility."""

from __future__ import annotations

from ascend_replay import backend, with_torch_npu
from xirang_ascend import smi
from xirang_ascend.compat import TorchNpu, check

from xirang.devices.compat import TorchBuild
from xirang.devices.health import DRAIN, OK, WARN, worst
from xirang.devices.reading import DeviceReading, NodeReading
from xirang_core.plugins import get_registry

NODE = NodeReading("npu-smi", (DeviceReading(0, model="Ascend 910B3"),))


def test_inventory_from_the_npu_smi_table() -> None:
    devices = backend("atlas_800t_a2").inventory()
    assert len(devices) == 8
    first = devices[0]
    assert (first.model, first.memory_bytes, first.pci_bus_id, first.driver) == (
        "Ascend 910B3",
        65536 * 2**20,
        "0000:C1:00.0",
        "23.0.rc3",
    )


def test_first_generation_910_reports_hbm_not_ddr() -> None:
    devices = backend("atlas_800_9000_faulty").inventory()
    assert {d.memory_bytes for d in devices} == {32768 * 2**20}


def test_hccs_topologies() -> None:
    full = [(g.link, g.devices) for g in backend("atlas_800t_a2").topology().groups]
    assert full == [("hccs", tuple(range(8))), ("node", tuple(range(8)))]
    rings = [(g.link, g.devices) for g in backend("atlas_800_9000_faulty").topology().groups]
    assert rings == [("hccs", (0, 1, 2, 3)), ("hccs", (4, 5, 6, 7)), ("node", tuple(range(8)))]


def test_alarm_levels_become_severities(monkeypatch) -> None:
    with_torch_npu(monkeypatch)
    found = {(f.device, f.check): f.severity for f in backend("atlas_800_9000_faulty").health()}
    assert found[(2, "alarm")] == WARN and found[(2, "temperature")] == WARN
    assert found[(5, "alarm")] == DRAIN
    assert found[(0, "device")] == OK


def test_healthy_box_with_torch_npu_is_usable(monkeypatch) -> None:
    with_torch_npu(monkeypatch)
    box = backend("atlas_800t_a2")
    assert worst(box.health()) == OK
    present, why = box.detect()
    assert present and why.startswith("8 x Ascend 910B3")


def test_without_torch_npu_the_npus_are_listed_but_not_usable() -> None:
    present, why = backend("atlas_800t_a2").detect()
    assert not present and "torch_npu is not installed" in why and "pip install torch-npu==" in why


def test_torch_npu_built_for_another_torch() -> None:
    [finding] = check(
        NODE, TorchBuild("2.3.1", None, None), TorchNpu("2.1.0.post3", "", True, 1), "x"
    )
    assert finding.severity == DRAIN
    assert "built for torch 2.1.0 but torch is 2.3.1" in finding.message


def test_torch_npu_failing_to_load_cann_points_at_set_env() -> None:
    npu = TorchNpu(import_error="ImportError: libhccl.so: cannot open shared object file")
    [finding] = check(NODE, TorchBuild("2.1.0", None, None), npu, "")
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in finding.message


def test_missing_cann_environment_is_a_caveat() -> None:
    findings = check(NODE, TorchBuild("2.1.0", None, None), TorchNpu("2.1.0", "", True, 1), "")
    assert [f.severity for f in findings] == [WARN]


def test_no_npu_smi_and_no_torch_npu() -> None:
    present, why = backend("nothing-recorded").detect()
    assert not present
    assert why == "no Ascend driver found (npu-smi not found on PATH; torch_npu not installed)"


def test_npu_smi_table_lines_outside_chips_are_ignored() -> None:
    assert smi.read("+----+\n| npu-smi 23.0.rc3 Version: 23.0.rc3 |\n").devices == ()


def test_registered_with_hccl_and_npu_devices() -> None:
    registry = get_registry()
    spec = registry.spec("device", "ascend")
    assert spec.priority > registry.spec("device", "cpu").priority and spec.requires == ()
    ascend = registry.create("device", {"name": "ascend"})
    assert (ascend.collective_backend(), ascend.torch_type) == ("hccl", "npu")


def test_ascend_rt_visible_devices_renumber_the_inventory(monkeypatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3,1")
    found = backend("atlas_800t_a2").inventory()
    assert [(d.index, d.extra["vendor_index"]) for d in found] == [(0, 3), (1, 1)]
