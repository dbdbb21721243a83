"""The pool service over real HTTP, on each real store (an SQLite file, PostgreSQL): tokens,
4xx errors, restarts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.rest import MAX_BODY, serve
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

OPERATOR = "operator-secret-for-tests"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _start(state: str, cluster: Path | None, clock: Clock) -> tuple[PoolService, str]:
    service = PoolService(PoolStore(state), cluster, "priority", OPERATOR, clock=clock)
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    service._server = server  # type: ignore[attr-defined]
    return service, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def pool(store_location: str, cluster_file: Path) -> Iterator[tuple[PoolService, str, Clock]]:
    clock = Clock()
    service, url = _start(store_location, cluster_file, clock)
    yield service, url, clock
    service._server.shutdown()  # type: ignore[attr-defined]
    service.store.close()


def _tokens(url: str) -> dict[str, str]:
    operator = PoolClient(url, OPERATOR)
    return {p: operator.call("PUT", f"/v1/projects/{p}", {})["token"] for p in ("nlp", "cv")}


def test_project_token_sees_and_cancels_only_its_own_jobs(pool) -> None:
    _, url, _ = pool
    tokens = _tokens(url)
    nlp, cv = PoolClient(url, tokens["nlp"]), PoolClient(url, tokens["cv"])
    job = nlp.submit(cards=2, priority="normal", name="bert")
    assert job["state"] == "running" and job["project"] == "nlp"
    assert [j["id"] for j in cv.call("GET", "/v1/jobs")] == []
    with pytest.raises(PoolError, match="no job") as err:
        cv.cancel(job["id"])
    assert err.value.status == 404
    with pytest.raises(PoolError, match="belongs to project 'cv'"):
        cv.submit(project="nlp", cards=1)
    assert nlp.cancel(job["id"])["state"] == "cancelled"
    assert len(PoolClient(url, OPERATOR).call("GET", "/v1/jobs")) == 1


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"cards": -1}, 400, "between 1 and"),
        ({"cards": 10**9}, 400, "between 1 and"),
        ({"cards": "8"}, 400, "whole number"),
        ({"cards": 1, "priority": "urgent"}, 400, "priority 'urgent'"),
        ({"cards": 1, "project": "nope"}, 403, "belongs to project"),
        ({"cards": 1, "colour": "red"}, 400, "unknown field 'colour'"),
        ({"cards": 9}, 400, "can never fit"),
    ],
)
def test_bad_submissions_get_clear_4xx(pool, body, status, message) -> None:
    _, url, _ = pool
    client = PoolClient(url, _tokens(url)["nlp"])
    with pytest.raises(PoolError, match=message) as err:
        client.submit(**body)
    assert err.value.status == status


def test_unknown_project_bad_token_oversized_payload(pool) -> None:
    _, url, _ = pool
    operator = PoolClient(url, OPERATOR)
    with pytest.raises(PoolError, match="unknown project 'ghost'") as err:
        operator.submit(project="ghost", cards=1)
    assert err.value.status == 404
    with pytest.raises(PoolError, match="invalid token") as err:
        PoolClient(url, "wrong").call("GET", "/v1/status")
    assert err.value.status == 401
    with pytest.raises(PoolError, match="over the") as err:
        operator.submit(cards=1, project="nlp", payload={"x": "y" * MAX_BODY})
    assert err.value.status == 413
    with pytest.raises(PoolError, match="operator token") as err:
        PoolClient(url, _tokens(url)["nlp"]).call("POST", "/v1/nodes/n-0000/drain", {})
    assert err.value.status == 403


def test_restart_loses_no_queued_or_running_job(store_location, pool) -> None:
    service, url, clock = pool
    client = PoolClient(url, _tokens(url)["nlp"])
    running = client.submit(cards=8)
    queued = client.submit(cards=4)
    assert (running["state"], queued["state"]) == ("running", "queued")
    service._server.shutdown()
    service.store.close()
    clock.now += 60
    again, url2 = _start(store_location, None, clock)  # no cluster file: from the store
    try:
        assert again.restored == 2
        jobs = {j["id"]: j for j in again.jobs("*operator*")}
        assert jobs[running["id"]]["state"] == "running"
        assert jobs[running["id"]]["devices"] == running["devices"]
        assert jobs[queued["id"]]["state"] == "queued"
        done = PoolClient(url2, OPERATOR).complete(running["id"], ok=True)
        assert done["state"] == "done"
        assert again.job("*operator*", queued["id"])["state"] == "running"
    finally:
        again._server.shutdown()
        again.store.close()


def test_drain_requeues_and_usage_is_metered(pool) -> None:
    _, url, clock = pool
    operator = PoolClient(url, OPERATOR)
    job = PoolClient(url, _tokens(url)["nlp"]).submit(cards=4)
    node = next(n["name"] for n in operator.call("GET", "/v1/nodes") if n["used"])
    clock.now += 1800
    answer = operator.call("POST", f"/v1/nodes/{node}/drain", {"reason": "ecc errors"})
    assert answer["requeued"] == [job["id"]]
    moved = operator.job(job["id"])
    assert moved["state"] == "running" and moved["requeues"] == 1
    drained = {n["name"]: n for n in operator.call("GET", "/v1/nodes")}[node]
    assert drained["healthy"] == 0 and drained["drain_reason"] == "ecc errors"
    usage = operator.call("GET", "/v1/usage?bucket=900")
    assert sum(u["device_seconds"] for u in usage if u["project"] == "nlp") == 4 * 1800
    assert json.loads(json.dumps(operator.call("GET", "/v1/status")))["drained"] == [node]


def test_each_request_checks_its_token_once(pool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenant gate resolves the caller (and counts its rate) and the routes use what it
    resolved: one hash and look-up per request, not one at the gate and one in the route."""
    service, url, _ = pool
    nlp = PoolClient(url, _tokens(url)["nlp"])
    checked: list[str] = []
    whoami = service.whoami
    monkeypatch.setattr(service, "whoami", lambda token: checked.append(token) or whoami(token))
    job = nlp.submit(cards=1)
    assert nlp.job(job["id"])["project"] == "nlp"
    assert len(checked) == 2  # two requests
    with pytest.raises(PoolError, match="invalid token") as refused:
        PoolClient(url, "not-a-token").job(job["id"])
    assert refused.value.status == 401 and len(checked) == 3
