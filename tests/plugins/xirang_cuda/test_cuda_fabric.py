"""Multi-node NVLink: trays of one GB200 NVL72 rack share a domain; fabric trouble is reported."""

from __future__ import annotations

import re

from cuda_replay import FIXTURES, as_cuda_host, backend
from xirang_cuda import fabric

from xirang.devices.health import DRAIN, WARN


def test_two_trays_report_the_same_nvlink_domain() -> None:
    first = {d.extra["nvlink_domain"] for d in backend("gb200_tray1").inventory()}
    second = {d.extra["nvlink_domain"] for d in backend("gb200_tray2").inventory()}
    assert first == second == {"6d2b4f7e-1c3a-4b5d-9e8f-0a1b2c3d4e5f/32766"}


def test_tray_topology_is_one_nvlink_island_of_four() -> None:
    groups = [(g.link, g.devices) for g in backend("gb200_tray1").topology().groups]
    assert groups == [("nvlink", (0, 1, 2, 3)), ("node", (0, 1, 2, 3))]


def test_single_node_nvswitch_has_no_domain() -> None:
    assert all("nvlink_domain" not in d.extra for d in backend("dgx_h100").inventory())


def test_degraded_fabric_bandwidth_warns(monkeypatch) -> None:
    as_cuda_host(monkeypatch, gpus=4)
    found = [f for f in backend("gb200_tray2").health() if f.check == "nvlink-fabric"]
    assert [(f.device, f.severity) for f in found] == [(3, WARN)]


def test_registration_states() -> None:
    text = (FIXTURES / "gb200_tray1" / "q.txt").read_text()
    failed = re.sub(r"Status\s+: Success", "Status : Failure", text, count=1)
    waiting = re.sub(r"State\s+: Completed", "State : In Progress", text, count=1)
    index = {"0008:01:00": 0}
    refused = fabric.fabric_findings(fabric.parse_fabric(failed), index)
    assert [(f.device, f.severity) for f in refused] == [(0, DRAIN)]
    pending = fabric.fabric_findings(fabric.parse_fabric(waiting), index)
    assert [(f.device, f.severity) for f in pending] == [(0, WARN)]
    assert "0008:01:00" not in fabric.domains(fabric.parse_fabric(waiting))
