"""A balanced run's straggler reported to the pool (issue #37): recorded in the job's history
always; with ``--drain-stragglers`` its node drained and the job requeued without it, only when
the model says the run finishes sooner and no other project's job is on the node. Over real
HTTP on an SQLite store."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.rest import serve
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore
from xirang_service.pool.stragglers import StragglerReport, predict

OPERATOR = "operator-secret-for-tests"
#: three nodes of four devices: an 8-card job spans two, the third is room to move to
CLUSTER = {
    "groups": [{"type": "gpu", "nodes": 3, "devices": 4, "prefix": "n"}],
    "projects": [{"name": "nlp", "guaranteed": 8}, {"name": "cv", "guaranteed": 4}],
}


def report(**changes: Any) -> dict[str, Any]:
    """Rank 1 of two at a quarter of its expected speed, 1,000 steps left, a 30 s restart."""
    base = {
        "rank": 1,
        "speed_ratio": 0.25,
        "speeds": [2.0, 0.5],
        "micro_batches": 8,
        "remaining_steps": 1000,
        "restart_s": 30.0,
    }
    return {**base, **changes}


Pool = Callable[[bool], tuple[PoolService, PoolClient, PoolClient]]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    """``pool(drain)``: a served pool (``--drain-stragglers`` when ``drain``), the operator's
    client and nlp's."""
    servers: list[Any] = []

    def start(drain: bool) -> tuple[PoolService, PoolClient, PoolClient]:
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(CLUSTER))
        store = PoolStore(tmp_path / "pool.db")
        service = PoolService(store, path, "priority", OPERATOR, drain_stragglers=drain)
        server = serve(service, "127.0.0.1", 0)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        operator = PoolClient(url, OPERATOR)
        token = operator.call("PUT", "/v1/projects/nlp", {})["token"]
        return service, operator, PoolClient(url, token)

    yield start
    for server in servers:
        server.shutdown()


def node_of(operator: PoolClient, device: int) -> str:
    return {d["id"]: d["node"] for d in operator.call("GET", "/v1/devices")}[device]


def history_says(client: PoolClient, job: int) -> str:
    return " | ".join(e["text"] for e in client.call("GET", f"/v1/jobs/{job}/history")["events"])


def test_the_model_weighs_the_steps_left_against_the_restart() -> None:
    # 8 micro-batches over speeds 2 and 0.5: shares 7:1, a 3.5 s step (6:2 would take 4 s);
    # replaced at 2.0: 4:4, a 2 s step
    prediction = predict(StragglerReport.from_body(report()))
    assert (prediction.step_s_now, prediction.step_s_replaced) == (3.5, 2.0)
    assert prediction.saved_s == 1000 * 1.5 - 30.0
    assert predict(StragglerReport.from_body(report(remaining_steps=10))).saved_s < 0


def test_by_default_a_straggler_is_recorded_and_its_node_kept(pool: Pool) -> None:
    _, operator, nlp = pool(False)
    job = nlp.submit(cards=8, name="llama")
    answer = nlp.straggler(job["id"], report())
    node = node_of(operator, job["devices"][4])  # rank 1 holds the second four devices
    assert answer["action"] == "reported" and "--drain-stragglers" in answer["why"]
    assert answer["node"] == node and answer["requeued"] == []
    assert all(n["healthy"] for n in operator.call("GET", "/v1/nodes"))
    assert nlp.job(job["id"])["requeues"] == 0
    said = history_says(nlp, job["id"])
    assert f"straggler reported: rank 1 at 0.25 of its expected speed, on {node}" in said


def test_with_drain_stragglers_a_drain_that_pays_moves_the_job_off_the_node(pool: Pool) -> None:
    _, operator, nlp = pool(True)
    job = nlp.submit(cards=8, name="llama")
    slow = node_of(operator, job["devices"][4])
    answer = nlp.straggler(job["id"], report())
    assert (answer["action"], answer["node"], answer["requeued"]) == ("drained", slow, [job["id"]])
    assert answer["saved_s"] == 1470.0
    moved = nlp.job(job["id"])
    assert moved["state"] == "running" and moved["requeues"] == 1
    assert slow not in {node_of(operator, d) for d in moved["devices"]}
    drained = {n["name"]: n for n in operator.call("GET", "/v1/nodes")}[slow]
    assert not drained["healthy"] and "straggler: job" in drained["drain_reason"]
    assert "drained: the run finishes about 1470 s sooner" in history_says(nlp, job["id"])


@pytest.mark.parametrize(
    ("steps_left", "cv_beside", "why"),
    [
        (10, False, "a drain would not pay (it would cost 25 s)"),  # 0.5 s a step saved
        (1000, True, "node n-0001 also runs other projects' jobs"),
    ],
)
def test_a_drain_that_does_not_pay_or_would_stop_another_project_is_not_made(
    pool: Pool, steps_left: int, cv_beside: bool, why: str
) -> None:
    _, operator, nlp = pool(True)
    job = nlp.submit(cards=6)  # ranks of two devices: 0 and 1 on n-0000, rank 2 on n-0001
    if cv_beside:
        token = operator.call("PUT", "/v1/projects/cv", {})["token"]
        beside = PoolClient(nlp.url, token).submit(cards=2)
        assert {node_of(operator, d) for d in beside["devices"]} == {"n-0001"}  # packed
    slowed = report(rank=2, speeds=[2.0, 2.0, 0.5], remaining_steps=steps_left)
    answer = nlp.straggler(job["id"], slowed)
    assert answer["node"] == "n-0001"
    assert answer["action"] == "reported" and answer["why"] == why, answer
    assert all(n["healthy"] for n in operator.call("GET", "/v1/nodes"))


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (report(rank=2), 400, "rank: 2 is not one of the 2 ranks in speeds (0..1)"),
        (report(speeds=[1.0, 1.0, 1.0]), 400, "3 ranks do not divide job 1's 8 devices"),
        (report(micro_batches=1), 400, "micro_batches: 1 cannot give each of the 2 ranks one"),
        (report(speed_ratio=1.5), 400, "speed_ratio: Input should be less than or equal to 1"),
        (report(speeds=[]), 400, "speeds: List should have at least 1 item"),
        ({"rank": 1}, 400, "speed_ratio is required"),
    ],
)
def test_a_bad_report_is_one_4xx_naming_the_field(
    pool: Pool, body: dict[str, Any], status: int, says: str
) -> None:
    _, _, nlp = pool(True)
    job = nlp.submit(cards=8)
    with pytest.raises(PoolError, match=re.escape(says)) as refused:
        nlp.straggler(job["id"], body)
    assert refused.value.status == status
    assert nlp.job(job["id"])["requeues"] == 0


def test_only_a_running_job_of_ones_own_has_stragglers(pool: Pool) -> None:
    _, operator, nlp = pool(True)
    running = nlp.submit(cards=8)
    queued = nlp.submit(cards=8)  # the pool is full for it
    with pytest.raises(PoolError, match="is queued; only a running job has ranks") as refused:
        nlp.straggler(queued["id"], report())
    assert refused.value.status == 409
    token = operator.call("PUT", "/v1/projects/cv", {})["token"]
    with pytest.raises(PoolError, match="no job") as hidden:
        PoolClient(nlp.url, token).straggler(running["id"], report())
    assert hidden.value.status == 404
