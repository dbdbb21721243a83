"""Priorities are governed: a project may use classes up to its operator-set highest one
(default ``normal``); a higher one is refused (403) naming the classes it may use."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pool.test_service import OPERATOR, Clock, _start
from xirang_service.pool.cli import main
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR as WHO_OPERATOR


@pytest.fixture
def served(tmp_path: Path, cluster_file: Path):
    service, url = _start(str(tmp_path / "pool.db"), cluster_file, Clock())
    yield service, url
    service._server.shutdown()  # type: ignore[attr-defined]
    service.store.close()


def test_a_project_may_not_promote_itself_until_the_operator_allows_it(served, capsys) -> None:
    service, url = served
    token = PoolClient(url, OPERATOR).call("PUT", "/v1/projects/nlp", {})["token"]
    nlp = PoolClient(url, token)
    with pytest.raises(PoolError, match="allowed: low, normal") as err:
        nlp.submit(cards=1, priority="critical")
    assert err.value.status == 403 and service.jobs(WHO_OPERATOR) == []
    assert nlp.submit(cards=1, priority="normal")["priority"] == "normal"

    assert main(["--url", url, "--token", OPERATOR, "quota", "nlp", "--max-priority", "high"]) == 0
    assert "high" in capsys.readouterr().out
    assert nlp.submit(cards=1, priority="high")["priority"] == "high"
    with pytest.raises(PoolError, match="allowed: low, normal, high") as err:
        nlp.submit(cards=1, priority="critical")
    assert err.value.status == 403
    operator = PoolClient(url, OPERATOR)  # the operator's own submissions are not limited
    assert operator.submit(project="nlp", cards=1, priority="critical")["priority"] == "critical"
    rows = {p["project"]: p["max_priority"] for p in operator.call("GET", "/v1/projects")}
    assert rows == {"nlp": "high", "cv": "normal"}


def test_the_highest_class_is_stored_and_set_in_the_cluster_file(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "groups: [{type: gpu, nodes: 1, devices: 4}]\n"
        "projects: [{name: prod, guaranteed: 4, max_priority: critical}, {name: dev}]\n"
    )
    state = str(tmp_path / "pool.db")
    service, _ = _start(state, cluster, Clock())
    service._server.shutdown()  # type: ignore[attr-defined]
    service.store.close()
    again, _ = _start(state, None, Clock())
    try:
        assert {p["project"]: p["max_priority"] for p in again.quotas(WHO_OPERATOR)} == {
            "prod": "critical",
            "dev": "normal",
        }
        with pytest.raises(PoolError, match="may not submit at priority high"):
            again.submit("dev", {"cards": 1, "priority": "high"})
        assert again.submit("prod", {"cards": 1, "priority": "critical"})["state"] == "running"
    finally:
        again._server.shutdown()  # type: ignore[attr-defined]
        again.store.close()
