"""A gang's devices are taken and freed node by node (the indices updated once per node)."""

from __future__ import annotations

import pytest

from xirang_service.pool.cluster import Inventory


def test_a_gang_with_a_busy_or_repeated_device_is_refused_before_anything_is_taken() -> None:
    """``take`` checks every device of a gang first: a refused gang leaves the free indices
    as they were (a half-taken gang would hold devices for no job)."""
    cluster = Inventory([{"name": "n0", "type": "gpu", "devices": 4}])
    cluster.take([0])
    for gang in ([1, 0], [2, 2]):
        with pytest.raises(AssertionError, match="is not free"):
            cluster.take(gang)
        assert cluster.type_free["gpu"] == 3 and cluster.nodes[0].free == {1, 2, 3}
    cluster.release([0])
    assert cluster.tightest_node("gpu", 4) == 0 and cluster.type_free["gpu"] == 4


def test_a_gang_over_two_nodes_updates_both_nodes_indices() -> None:
    cluster = Inventory([{"name": f"n{i}", "type": "gpu", "devices": 4} for i in range(2)])
    cluster.take([2, 3, 4, 5, 6])
    assert [len(n.free) for n in cluster.nodes] == [2, 1]
    assert cluster.stranded == 3 and cluster.tightest_node("gpu", 1) == 1
    assert cluster.tightest_node("gpu", 2) == 0 and cluster.tightest_node("gpu", 3) is None
    cluster.release([2, 3, 4, 5, 6])
    assert cluster.total_free == 8 and cluster.stranded == 0
