"""AMD boxes on recorded rocm-smi output: inventory, xGMI topology, RAS health, compatibility."""

from __future__ import annotations

from types import SimpleNamespace

from rocm_replay import FIXTURES, as_rocm_host, backend
from xirang_rocm import amdsmi_reader, ras, smi
from xirang_rocm.compat import TorchRocm, check

from xirang.devices.compat import TorchBuild
from xirang.devices.health import DRAIN, OK, WARN, worst
from xirang.devices.reading import DeviceReading, NodeReading
from xirang_core.plugins import get_registry


def test_inventory_from_rocm_smi_json_after_warnings() -> None:
    devices = backend("mi300x").inventory()
    assert len(devices) == 8
    first = devices[0]
    assert (first.model, first.memory_bytes, first.pci_bus_id) == (
        "AMD Instinct MI300X",
        206141652992,
        "0000:05:00.0",
    )
    assert (first.driver, first.runtime, first.extra["gfx"]) == ("6.7.0", "6.2.0-66", "gfx942")


def test_xgmi_everywhere_is_one_group() -> None:
    groups = [(g.link, g.devices) for g in backend("mi300x").topology().groups]
    assert groups == [("xgmi", tuple(range(8))), ("node", tuple(range(8)))]


def test_bridged_pairs_nest_inside_numa_pcie_groups() -> None:
    groups = [(g.link, g.devices) for g in backend("mi210_mixed").topology().groups]
    assert groups == [
        ("xgmi", (0, 1)),
        ("xgmi", (2, 3)),
        ("xgmi", (4, 5)),
        ("pcie", (0, 1, 2, 3)),
        ("pcie", (4, 5, 6, 7)),
        ("node", tuple(range(8))),
    ]


def test_failed_node_health(monkeypatch) -> None:
    as_rocm_host(monkeypatch, gpus=4)
    found = {(f.device, f.check): f for f in backend("failed_node").health()}
    assert found[(2, "ras")].severity == DRAIN and "UMC 3" in found[(2, "ras")].message
    assert found[(2, "ecc")].severity == WARN  # 214 corrected errors
    # junction 97 C is a busy MI250X, not a failing one; the edge sensor's 89 C is worth a look
    assert found[(2, "temperature")].severity == WARN
    assert found[(2, "temperature")].message.startswith("edge 89 C")
    assert found[(2, "kernel")].severity == DRAIN
    assert found[(3, "kernel")].severity == WARN
    assert found[(0, "device")].severity == OK


def test_healthy_mi300x(monkeypatch) -> None:
    as_rocm_host(monkeypatch)
    box = backend("mi300x")
    assert worst(box.health()) == OK
    assert box.detect() == (True, "8 x AMD Instinct MI300X (driver 6.7.0, read with rocm-smi)")


def test_ras_table_parsing() -> None:
    parsed = ras.parse_ras((FIXTURES / "failed_node" / "ras.txt").read_text())
    assert parsed[2]["UMC"] == (214, 3)
    assert "ATHUB" not in parsed[0]  # disabled blocks count nothing
    assert ras.totals(parsed[1]) == (4, 0)


def test_cuda_torch_on_a_rocm_host_names_the_rocm_wheel() -> None:
    node = NodeReading("rocm-smi", (DeviceReading(0, model="MI300X"),))
    [finding] = check(node, TorchBuild("2.5.1+cu124", "12.4", None), TorchRocm(), "6.2.0-66")
    assert finding.severity == DRAIN
    assert "CUDA build" in finding.message and "whl/rocm6.2" in finding.message


def test_gpu_arch_missing_from_torch_and_release_skew() -> None:
    node = NodeReading("rocm-smi", (DeviceReading(0, model="MI300X", extra={"gfx": "gfx942"}),))
    build = TorchBuild("2.3.0+rocm6.0", None, "6.0.32830")
    findings = check(node, build, TorchRocm(True, 1, ("gfx90a:xnack-", "gfx908")), "6.2.0")
    assert [f.severity for f in findings] == [WARN, DRAIN]
    assert "gfx942" in findings[1].message


def test_no_driver_and_no_library() -> None:
    present, why = backend("nothing-recorded").detect()
    assert not present
    assert why == "no AMD GPU driver found (rocm-smi not found on PATH; amdsmi not installed)"


def test_amdsmi_reader_translates_the_library() -> None:
    amd = SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_gpu_asic_info=lambda h: {
            "market_name": "AMD Instinct MI300X",
            "target_graphics_version": "gfx942",
        },
        amdsmi_get_gpu_total_ecc_count=lambda h: {"correctable_count": 5, "uncorrectable_count": 1},
        amdsmi_get_temp_metric=lambda h, kind, metric: 51,
        amdsmi_get_gpu_memory_total=lambda h, kind: 206141652992,
        amdsmi_get_gpu_device_bdf=lambda h: "0000:05:00.0",
        amdsmi_get_gpu_device_uuid=lambda h: "uuid-0",
        amdsmi_get_gpu_driver_info=lambda h: {"driver_version": "6.7.0"},
        AmdSmiTemperatureType=SimpleNamespace(HOTSPOT=1),
        AmdSmiTemperatureMetric=SimpleNamespace(CURRENT=0),
        AmdSmiMemoryType=SimpleNamespace(VRAM=0),
    )
    node = amdsmi_reader.read(amd)
    [gpu] = node.devices
    assert (node.driver, gpu.ecc_uncorrected, gpu.extra["gfx"]) == ("6.7.0", 1, "gfx942")


def test_rocm_smi_without_json_reports_why() -> None:
    assert smi.read("", "rocm-smi exited 2: ERROR: GPU[0] is not responding").problem.startswith(
        "rocm-smi exited 2"
    )


def test_registered_as_rccl_under_torchs_nccl_name() -> None:
    registry = get_registry()
    spec = registry.spec("device", "rocm")
    assert spec.priority > registry.spec("device", "cpu").priority and spec.requires == ()
    rocm = registry.create("device", {"name": "rocm"})
    assert (rocm.collective_backend(), rocm.torch_type) == ("nccl", "cuda")


def test_without_showtopo_all_gpus_share_the_node() -> None:
    box = backend("mi300x")
    box.run.outputs = {k: v for k, v in box.run.outputs.items() if k != ("rocm-smi", "--showtopo")}
    assert [(g.link, g.devices) for g in box.topology().groups] == [("node", tuple(range(8)))]


def test_hip_visible_devices_renumber_inventory_and_links(monkeypatch) -> None:
    """HIP_VISIBLE_DEVICES=6,7: the process sees two GPUs, cuda:0 and cuda:1 (vendor 6, 7)."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "6,7")
    box = backend("mi300x")
    assert [d.extra["vendor_index"] for d in box.inventory()] == [6, 7]
    assert {m for g in box.topology().groups for m in g.devices} == {0, 1}
