"""A failed A100 node drains exactly the GPUs that need it; a healthy DGX reports all ok."""

from __future__ import annotations

from pathlib import Path

from cuda_replay import FIXTURES, as_cuda_host, backend
from xirang_cuda import xid

from xirang.devices.health import DRAIN, OK, WARN, worst


def _by_check(findings):
    return {(f.device, f.check): f for f in findings}


def test_failed_node_findings(monkeypatch) -> None:
    as_cuda_host(monkeypatch, gpus=7)
    found = _by_check(backend("failed_node").health())
    assert found[(2, "lost")].severity == DRAIN
    assert found[(2, "xid")].severity == DRAIN and "XID 79" in found[(2, "xid")].message
    assert found[(5, "ecc")].severity == DRAIN
    assert found[(5, "xid")].severity == WARN and "(2 times)" in found[(5, "xid")].message
    assert found[(1, "xid")].severity == WARN  # XID 13: usually the application's fault
    assert found[(6, "temperature")].severity == WARN
    assert found[(6, "throttle")].severity == WARN
    assert found[(0, "device")].severity == OK


def test_healthy_dgx_is_all_ok(monkeypatch) -> None:
    as_cuda_host(monkeypatch)
    findings = backend("dgx_h100").health()
    assert worst(findings) == OK
    assert sorted(f.device for f in findings) == list(range(8))


def test_gpu_missing_from_the_driver_is_caught_on_the_pci_bus(monkeypatch, tmp_path: Path) -> None:
    as_cuda_host(monkeypatch)
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "c1"]  # c1: not in nvidia-smi's list
    for bus in buses:
        (tmp_path / f"0000:{bus}:00.0").mkdir()
        (tmp_path / f"0000:{bus}:00.0" / "vendor").write_text("0x10de\n")
        (tmp_path / f"0000:{bus}:00.0" / "class").write_text("0x030200\n")
    findings = backend("dgx_h100", sysfs=tmp_path).health()
    missing = [f for f in findings if f.check == "lost"]
    assert [(f.severity, "0000:c1:00.0" in f.message) for f in missing] == [(DRAIN, True)]


def test_gpus_of_the_host_that_this_container_was_not_given_are_not_lost(
    monkeypatch, tmp_path: Path
) -> None:
    """A container sees every GPU of the host on the PCI bus, but only its own in the driver's
    folders and device nodes (hand-made here as the NVIDIA container runtime leaves them): the
    others must not drain the node; one it was given that the driver lost still does."""
    as_cuda_host(monkeypatch)
    sysfs, procfs, dev = tmp_path / "sys", tmp_path / "gpus", tmp_path / "dev"
    listed = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]  # nvidia-smi's eight
    for minor, bus in enumerate([*listed, "c1", "e4"]):
        (sysfs / f"0000:{bus}:00.0").mkdir(parents=True)
        (sysfs / f"0000:{bus}:00.0" / "vendor").write_text("0x10de\n")
        (sysfs / f"0000:{bus}:00.0" / "class").write_text("0x030200\n")
        if bus != "e4":  # e4: another container's GPU, hidden from this one
            (procfs / f"0000:{bus}:00.0").mkdir(parents=True)
            (procfs / f"0000:{bus}:00.0" / "information").write_text(f"Device Minor: {minor}\n")
            (dev / f"nvidia{minor}").parent.mkdir(exist_ok=True)
            (dev / f"nvidia{minor}").touch()
    cuda = backend("dgx_h100", sysfs=sysfs)
    cuda.procfs_gpus, cuda.dev = procfs, dev
    lost = [f.message for f in cuda.health() if f.check == "lost"]
    assert len(lost) == 1 and "0000:c1:00.0" in lost[0]  # given, and gone from the driver
    (dev / "nvidia8").unlink()  # c1 was not given to this container either
    assert [f for f in cuda.health() if f.check == "lost"] == []


def test_xid_classification() -> None:
    log = (FIXTURES / "failed_node" / "dmesg.txt").read_text()
    parsed = xid.parse_xids(log.splitlines())
    assert [(bus, code) for bus, code, _ in parsed] == [
        ("0000:0f:00", 13),
        ("0000:90:00", 94),
        ("0000:90:00", 94),
        ("0000:47:00", 79),
    ]
    unknown = xid.xid_findings("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, something new", {})
    assert unknown[0].severity == WARN and unknown[0].device is None
