"""The pool's database goes away and comes back: a PostgreSQL server restarted under a serving
pool (its own throwaway cluster, stopped and started by the test), and an SQLite file another
process holds locked. Meanwhile writes answer 503 with ``Retry-After`` and a message naming the
store, never 500; afterwards the same pool serves again, without a restart, and every
acknowledged job is in the store."""

from __future__ import annotations

import http.client
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pool import postgres
from tests.pool.web import Served, served
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.store import PoolStore


@pytest.fixture
def restartable_postgres() -> Iterator[str]:
    """A PostgreSQL cluster of this test's own, since the test stops and starts its server."""
    with postgres.cluster() as url:
        yield postgres.fresh_database(url, "pool_failover")


def request(
    pool: Served,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    key: str = "",
    who: str = "nlp",
) -> tuple[int, dict[str, str], Any]:
    """Status, headers and JSON answer of one request as ``who`` (project nlp)."""
    headers = {"Authorization": f"Bearer {pool.tokens[who]}"}
    if key:
        headers["Idempotency-Key"] = key
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(pool.host, pool.port, timeout=30)
    try:
        conn.request(method, path, data, headers)
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), json.loads(answer.read())
    finally:
        conn.close()


def refused_while_away(pool: Served, method: str, path: str, body: Any = None) -> str:
    """The request is a 503 with a whole-seconds Retry-After; its message."""
    status, headers, answer = request(pool, method, path, body)
    assert status == 503, (status, answer)
    assert int(headers["retry-after"]) >= 1
    return answer["error"]


def until_accepted(pool: Served, body: dict[str, Any], key: str) -> dict[str, Any]:
    """Submit (the same idempotency key each time) until the pool takes it: 503s meanwhile."""
    for _ in range(300):
        status, _, answer = request(pool, "POST", "/v1/jobs", body, key)
        if status == 201:
            return answer
        assert status == 503, (status, answer)
        time.sleep(0.1)
    raise AssertionError("the pool never took a write again after its database came back")


@pytest.mark.service
def test_a_postgresql_restart_is_503_while_away_and_writes_resume_without_a_restart(
    restartable_postgres: str, cluster_file: Path
) -> None:
    url = restartable_postgres
    with served(url, cluster_file) as pool:
        acked = [request(pool, "POST", "/v1/jobs", {"cards": 1})[2] for _ in range(3)]
        postgres.stop(url)
        message = refused_while_away(pool, "POST", "/v1/jobs", {"cards": 1, "name": "lost"})
        assert "pool store postgresql://postgres@/pool_failover" in message
        assert "unreachable" in message and "try again" in message
        refused_while_away(pool, "POST", "/v1/jobs", {"cards": 1, "name": "lost"})  # backing off
        refused_while_away(pool, "DELETE", f"/v1/jobs/{acked[0]['id']}")
        refused_while_away(pool, "GET", "/v1/usage")  # a read of the store itself
        status, _, seen = request(pool, "GET", "/v1/jobs")  # answered from memory
        assert status == 200 and {j["id"] for j in seen} == {j["id"] for j in acked}
        status, _, summary = request(pool, "GET", "/v1/status", who="operator")
        assert status == 200 and summary["running"] == 3 and summary["set_aside"] == []
        pool.service.tick()  # the tick loop logs the outage and carries on
        postgres.start(url)
        after = until_accepted(pool, {"cards": 1, "name": "after"}, "after-restart")
        cancelled = request(pool, "DELETE", f"/v1/jobs/{acked[0]['id']}")
        assert cancelled[0] == 200 and cancelled[2]["state"] == "cancelled"
        pool.service.tick()
    store = PoolStore(url)
    stored = {job.id: job.state.value for job in store.jobs()}
    store.close()
    assert set(stored) == {j["id"] for j in [*acked, after]}  # none lost, no refused one kept
    assert stored[acked[0]["id"]] == "cancelled"


def test_a_locked_sqlite_store_is_503_and_writes_resume_once_it_is_released(
    tmp_path: Path, cluster_file: Path
) -> None:
    state = str(tmp_path / "pool.db")
    with served(state, cluster_file) as pool:
        first = request(pool, "POST", "/v1/jobs", {"cards": 1})[2]
        other = sqlite3.connect(state, isolation_level=None, timeout=0)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        message = refused_while_away(pool, "POST", "/v1/jobs", {"cards": 1})
        assert "database is locked" in message
        other.execute("ROLLBACK")
        other.close()
        after = until_accepted(pool, {"cards": 1}, "after-lock")
        assert {j["id"] for j in pool.service.jobs(OPERATOR_WHO)} == {first["id"], after["id"]}
