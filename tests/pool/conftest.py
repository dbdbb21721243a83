"""Small pools for the pool tests: built from cluster-file data, with real policy plugins; and
the two state stores (an SQLite file, a throwaway PostgreSQL cluster)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pool import postgres
from xirang_service.pool import clusterfile
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.policy import load_policy

_databases = itertools.count()


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


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[str]:
    """One PostgreSQL server for the session (initdb takes seconds); tests get databases."""
    with postgres.cluster() as url:
        yield url


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.service)],
)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's pool keeps its state: a fresh SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "pool.db")
    cluster_url = request.getfixturevalue("postgres_cluster")
    return postgres.fresh_database(cluster_url, f"pool_{next(_databases)}")


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [{"type": "gpu", "nodes": 2, "devices": 4, "prefix": "n"}],
                "projects": [{"name": "nlp", "guaranteed": 4}, {"name": "cv", "guaranteed": 4}],
            }
        )
    )
    return path
