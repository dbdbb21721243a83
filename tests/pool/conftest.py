"""Small pools for the pool tests: built from cluster-file data, with real policy plugins."""

from __future__ import annotations

from typing import Any

import pytest

from xirang_core.pool import clusterfile
from xirang_core.pool.engine import PoolEngine
from xirang_core.pool.policy import load_policy


def make_engine(
    policy: str = "priority",
    nodes: int = 4,
    devices: int = 4,
    per_leaf: int = 2,
    projects: list[dict[str, Any]] | None = None,
    **settings: Any,
) -> PoolEngine:
    """``nodes`` nodes of ``devices`` devices (type ``gpu``), two NVLink domains per node."""
    data = {
        "groups": [
            {
                "type": "gpu",
                "nodes": nodes,
                "devices": devices,
                "nodes_per_leaf": per_leaf,
                "domain_size": max(1, devices // 2),
            }
        ],
        "projects": projects or [{"name": "a", "guaranteed": nodes * devices}],
    }
    cluster, throughputs, quotas = clusterfile.build(data)
    return PoolEngine(cluster, throughputs, load_policy(policy, **settings), quotas)


@pytest.fixture
def engine() -> PoolEngine:
    return make_engine()
