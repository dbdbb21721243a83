"""``scheduler=pool``: a real run submitted to a real pool service, run here when admitted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK
from xirang_core.pool.client import PoolClient
from xirang_core.pool.rest import serve
from xirang_core.pool.service import OPERATOR, PoolService
from xirang_core.pool.store import PoolStore


@pytest.fixture
def pool_env(tmp_path: Path) -> Iterator[tuple[PoolService, dict[str, str]]]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "nodes": [{"name": "here", "type": "cpu", "devices": 2}],
                "projects": [{"name": "nlp", "guaranteed": 2}],
            }
        )
    )
    service = PoolService(PoolStore(tmp_path / "pool.db"), cluster, "priority", "op-token")
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    token = PoolClient(url, "op-token").call("PUT", "/v1/projects/nlp", {})["token"]
    yield service, {"XIRANG_POOL_URL": url, "XIRANG_POOL_TOKEN": token}
    server.shutdown()


@pytest.mark.slow
def test_run_is_admitted_by_the_pool_and_reported_done(run_xirang, pool_env) -> None:
    service, env = pool_env
    result = run_xirang(
        "scheduler=pool", "project=nlp", "pool.cards=1", "pool.priority=high", *QUICK, env=env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pool: job 1 submitted" in result.stdout
    (job,) = service.jobs(OPERATOR)
    assert (job["state"], job["priority"], job["project"]) == ("done", "high", "nlp")
    assert job["payload"]["run_dir"]


def test_bad_priority_is_refused_with_the_service_message(run_xirang, pool_env) -> None:
    _, env = pool_env
    result = run_xirang("scheduler=pool", "project=nlp", "pool.priority=urgent", *QUICK, env=env)
    assert result.returncode != 0
    assert "priority 'urgent' is not valid" in result.stderr + result.stdout
