"""CUDA_VISIBLE_DEVICES=4,5,6,7 on an 8-GPU node (Slurm without device cgroups): inventory,
health, power and topology all speak of the four GPUs this process's torch sees, as cuda:0-3."""

from __future__ import annotations

from cuda_replay import as_cuda_host, backend
from test_cuda_power import with_power

from xirang_core.faults.health import drained


def test_inventory_is_the_visible_gpus_numbered_as_torch(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    found = backend("dgx_h100").inventory()
    assert [d.index for d in found] == [0, 1, 2, 3]
    assert [d.extra["vendor_index"] for d in found] == [4, 5, 6, 7]
    # cuda:0 keeps vendor GPU 4's bus id, rail NIC and CPU affinity
    assert (found[0].pci_bus_id, found[0].extra["nic"]) == ("00000000:9A:00.0", "mlx5_4 (PXB)")
    assert found[0].extra["cpu_affinity"] == "56-111,168-223"


def test_drain_names_the_ordinal_of_the_failed_gpu_and_ignores_others(monkeypatch) -> None:
    """failed_node: vendor GPU 2 is lost (XID 79), GPU 5 has uncorrectable ECC errors."""
    as_cuda_host(monkeypatch, gpus=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert set(drained(backend("failed_node"))) == {1}  # vendor 5 is cuda:1; GPU 2 not ours


def test_power_is_read_from_this_process_gpus(monkeypatch) -> None:
    import xirang_cuda.backend as module

    monkeypatch.setattr(module, "import_optional", lambda name: with_power({0: 50_000, 1: 700_000}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert backend("dgx_h100").power_watts() == {0: 700.0}


def test_topology_groups_are_of_visible_gpus(monkeypatch) -> None:
    """mixed_pcie_nvlink: NVLink bridges on pairs (0,1), (2,3), (4,5)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,4,6")
    topology = backend("mixed_pcie_nvlink").topology()
    assert topology.group_of(0).link == "nvlink" and topology.group_of(0).devices == (0, 1)
    assert all(set(g.devices) <= {0, 1, 2} for g in topology.groups)
