"""Gang placement: closest groups first, best fit, never a drained node, all or nothing."""

from __future__ import annotations

from xirang_service.pool.cluster import Inventory
from xirang_service.pool.placement import place, span


def _cluster() -> Inventory:
    nodes = []
    for i in range(8):  # 8 nodes x 4 devices, 2 nodes per leaf, 2 leaves per spine
        nodes.append(
            {
                "name": f"n{i}",
                "type": "gpu",
                "devices": 4,
                "domain_size": 2,
                "leaf": f"l{i // 2}",
                "spine": f"s{i // 4}",
            }
        )
    return Inventory(nodes)


def test_small_job_stays_inside_one_nvlink_domain() -> None:
    cluster = _cluster()
    devices = place(cluster, "gpu", 2)
    assert devices is not None
    node = cluster.node_of(devices[0])
    assert {node.domain_of(d) for d in devices} == {node.domain_of(devices[0])}


def test_best_fit_prefers_the_partly_used_node() -> None:
    cluster = _cluster()
    cluster.take([0, 1, 2])  # n0 has one free device left
    devices = place(cluster, "gpu", 1)
    assert devices == [3]


def test_gang_spans_fewest_nodes_within_one_leaf() -> None:
    cluster = _cluster()
    devices = place(cluster, "gpu", 8)
    assert devices is not None and len(devices) == 8
    assert span(cluster, devices) == {"nodes": 2, "leaves": 1, "spines": 1}


def test_gang_is_all_or_nothing() -> None:
    cluster = _cluster()
    cluster.take(range(0, 30))
    assert place(cluster, "gpu", 3) is None
    assert cluster.free_devices() == 2


def test_drained_node_is_never_placed() -> None:
    cluster = _cluster()
    cluster.set_health("n0", False)
    for _ in range(7):
        devices = place(cluster, "gpu", 4)
        assert devices is not None and cluster.node_of(devices[0]).name != "n0"
        cluster.take(devices)
    assert place(cluster, "gpu", 1) is None


def test_unknown_type_and_zero_count_place_nothing() -> None:
    cluster = _cluster()
    assert place(cluster, "tpu", 1) is None
    assert place(cluster, "gpu", 0) is None
