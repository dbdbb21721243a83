"""NVSwitch, bridged-NVLink and PCIe boxes become the interconnect groups the planner reads."""

from __future__ import annotations

from cuda_replay import FIXTURES, backend, replay
from xirang_cuda import topo
from xirang_cuda.backend import CudaBackend

from xirang.devices.replay import ReplayRunner


def _groups(box: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(g.link, g.devices) for g in backend(box).topology().groups]


def test_nvswitch_box_is_one_nvlink_island() -> None:
    assert _groups("dgx_h100") == [("nvlink", tuple(range(8))), ("node", tuple(range(8)))]


def test_mixed_box_nests_nvlink_pairs_in_pcie_sockets() -> None:
    assert _groups("mixed_pcie_nvlink") == [
        ("nvlink", (0, 1)),
        ("nvlink", (2, 3)),
        ("nvlink", (4, 5)),
        ("pcie", (0, 1, 2, 3)),
        ("pcie", (4, 5, 6, 7)),
        ("node", tuple(range(8))),
    ]
    topology = backend("mixed_pcie_nvlink").topology()
    assert topology.group_of(6).link == "pcie"  # unbridged GPU: PCIe is its fastest link
    assert topology.group_of(4).link == "nvlink"


def test_each_dgx_gpu_uses_its_own_rail_nic() -> None:
    facts = topo.affinity((FIXTURES / "dgx_h100" / "topo.txt").read_text())
    assert [facts[g]["nic"] for g in range(8)] == [f"mlx5_{g} (PXB)" for g in range(8)]
    assert facts[0]["numa_node"] == "0" and facts[7]["numa_node"] == "1"
    assert facts[5]["cpu_affinity"] == "56-111,168-223"


def test_inventory_carries_nic_and_numa_affinity() -> None:
    devices = backend("dgx_h100").inventory()
    assert devices[3].extra["nic"] == "mlx5_3 (PXB)"
    assert devices[3].extra["uuid"].startswith("GPU-")


def test_without_a_link_matrix_all_gpus_share_the_node() -> None:
    recorded = replay("dgx_h100").outputs
    runner = ReplayRunner({cmd: out for cmd, out in recorded.items() if cmd != topo.COMMAND})
    groups = CudaBackend(runner=runner, sysfs_pci=FIXTURES / "no-sysfs").topology().groups
    assert [(g.link, g.devices) for g in groups] == [("node", tuple(range(8)))]
