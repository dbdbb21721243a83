"""One tenant cannot crowd out the others: a project's queued and running jobs and their
payload bytes are capped (429 and 413, naming the cap and how to raise it; the operator sets
them, they survive a restart), reads answer without the service's lock, and a job's charge is
priced from that job's rows, the same as from the whole pool's state. A project over its request
rate is a 429 with Retry-After, and only that project."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.pool.web import OPERATOR, served
from xirang_service.console.state import read_state
from xirang_service.cost.governor import Governor, PoolBudgets
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool import clusterfile
from xirang_service.pool.cli import main as cli_main
from xirang_service.pool.errors import PoolError
from xirang_service.pool.quota import DEFAULT_MAX_JOBS, DEFAULT_MAX_PAYLOAD_BYTES
from xirang_service.pool.rest import LIMITS
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

SEATS = LIMITS.seats_per_token


def refused(call: Callable[[], Any]) -> PoolError:
    with pytest.raises(PoolError) as err:
        call()
    return err.value


def test_a_project_at_its_job_cap_is_429_and_others_still_submit(
    store_location: str, cluster_file: Path
) -> None:
    with served(store_location, cluster_file) as pool:
        operator, nlp = pool.client("operator"), pool.client("nlp")
        row = operator.call("PUT", "/v1/projects/nlp", {"max_jobs": 3})
        assert row["max_jobs"] == 3 and row["max_payload_bytes"] == DEFAULT_MAX_PAYLOAD_BYTES
        jobs = [nlp.submit(cards=1) for _ in range(3)]
        error = refused(lambda: nlp.submit(cards=1))
        assert error.status == 429 and "max_jobs 3" in str(error) and "3 jobs queued" in str(error)
        assert pool.client("cv").submit(cards=1)["state"] == "running"  # another tenant
        nlp.cancel(jobs[0]["id"])
        assert nlp.submit(cards=1)["project"] == "nlp"  # back under the cap
    restarted = PoolService(PoolStore(store_location), None, "priority", OPERATOR)
    try:
        (row,) = restarted.quotas("nlp")
        assert row["max_jobs"] == 3
        assert refused(lambda: restarted.submit("nlp", {"cards": 1})).status == 429
    finally:
        restarted.store.close()


def test_a_project_past_its_payload_bytes_is_413_naming_the_limit(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        operator, nlp = pool.client("operator"), pool.client("nlp")
        assert operator.call("GET", "/v1/projects")[0]["max_jobs"] == DEFAULT_MAX_JOBS
        operator.call("PUT", "/v1/projects/nlp", {"max_payload_bytes": 300})
        first = nlp.submit(cards=1, payload={"note": "x" * 200})
        error = refused(lambda: nlp.submit(cards=1, payload={"note": "y" * 200}))
        assert error.status == 413 and "max_payload_bytes 300" in str(error)
        nlp.complete(first["id"], True)  # an ended job's payload no longer counts
        assert nlp.submit(cards=1, payload={"note": "y" * 200})["project"] == "nlp"
        for bad in ({"max_jobs": 0}, {"max_payload_bytes": -1}, {"max_jobs": "9"}):
            error = refused(lambda bad=bad: operator.call("PUT", "/v1/projects/nlp", bad))
            assert error.status == 400 and next(iter(bad)) in str(error)


def test_reads_answer_while_the_service_lock_is_held(tmp_path: Path, cluster_file: Path) -> None:
    """A long change (or a tenant's slow request) holds the lock; reads do not wait for it."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        job = pool.client("nlp").submit(cards=1)
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with pool.service.lock:
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        answers: list[Any] = []
        reader = threading.Thread(
            target=lambda: answers.extend(
                [
                    pool.client("nlp").job(job["id"])["state"],
                    len(pool.client("nlp").call("GET", "/v1/jobs")),
                    pool.client("nlp").call("GET", "/v1/status")["running"],
                    pool.client("nlp").call("GET", "/v1/queue"),
                    pool.client("nlp").charge(job["id"]),
                ]
            )
        )
        reader.start()
        reader.join(20)
        release.set()
        holder.join()
        assert answers == ["running", 1, 1, [], None]


def test_a_charge_priced_from_its_own_rows_equals_the_whole_state_price(
    tmp_path: Path, cluster_file: Path
) -> None:
    clock = [1000.0]
    budgets = PoolBudgets(Governor(CostStore(tmp_path / "cost.db")), Meter(PriceBook({"gpu": 1})))
    pool = PoolService(
        PoolStore(str(tmp_path / "pool.db")),
        cluster_file,
        "priority",
        OPERATOR,
        clock=lambda: clock[0],
        budgets=budgets,
    )
    try:
        ids = [pool.submit("nlp", {"cards": 2})["id"] for _ in range(2)]
        ids += [pool.submit("cv", {"cards": 4})["id"], pool.submit("nlp", {"cards": 4})["id"]]
        clock[0] += 100
        pool.complete(OPERATOR_WHO, ids[0], True)
        clock[0] += 50
        pool.cancel(OPERATOR_WHO, ids[1])  # the queued 4-card job starts in the freed cards
        clock[0] += 30
        now = clock[0]
        whole = read_state(pool.store, now, usage=True)
        for job_id in ids:
            assert pool.job_charge(OPERATOR_WHO, job_id) == budgets.job_charge(whole, job_id, now)
        charges = [pool.job_charge(OPERATOR_WHO, job_id) for job_id in ids]
        assert [c["device_s"] for c in charges] == [200.0, 300.0, 720.0, 120.0]
        with pytest.raises(PoolError, match="no job"):
            pool.job_charge("cv", ids[0])  # another project's job does not exist for cv
    finally:
        pool.store.close()


def _get(pool: Any, who: str) -> tuple[int, dict[str, str], dict[str, Any]]:
    """GET /v1/jobs as ``who``: status, headers (lower-case names) and answer."""
    conn = http.client.HTTPConnection(pool.host, pool.port, timeout=10)
    try:
        conn.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer {pool.tokens[who]}"})
        answer = conn.getresponse()
        return (
            answer.status,
            {k.lower(): v for k, v in answer.getheaders()},
            json.loads(answer.read()),
        )
    finally:
        conn.close()


def test_a_project_over_its_request_rate_is_429_with_retry_after_and_others_are_served(
    store_location: str, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with served(store_location, cluster_file) as pool:
        args = ["--url", pool.url, "--token", OPERATOR, "--json", "quota", "nlp"]
        assert cli_main([*args, "--rate", "0.5", "--burst", "2", "--max-jobs", "7"]) == 0
        row = json.loads(capsys.readouterr().out)
        assert (row["rate"], row["burst"], row["max_jobs"]) == (0.5, 2, 7)
        assert [_get(pool, "nlp")[0] for _ in range(2)] == [200, 200]  # its burst
        status, headers, answer = _get(pool, "nlp")
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert "over its request rate (0.5/s, bursts of 2)" in answer["error"]
        assert "--rate" in answer["error"]
        assert _get(pool, "cv")[0] == 200  # another tenant, and the operator, are not limited
        assert all(_get(pool, "operator")[0] == 200 for _ in range(5))
        time.sleep(int(headers["retry-after"]))  # the bucket refilled by then
        assert _get(pool, "nlp")[0] == 200
        for bad in ({"rate": -1}, {"rate": "5"}, {"burst": 1.5}):
            error = refused(
                lambda bad=bad: pool.client("operator").call("PUT", "/v1/projects/cv", bad)
            )
            assert error.status == 400 and next(iter(bad)) in str(error)
    restarted = PoolService(PoolStore(store_location), None, "priority", OPERATOR)
    try:
        (row,) = restarted.quotas("nlp")
        assert (row["rate"], row["burst"]) == (0.5, 2)  # stored with the project
    finally:
        restarted.store.close()


def test_a_rate_in_the_cluster_file_applies_and_a_bad_one_is_named(tmp_path: Path) -> None:
    data = {"groups": [{"type": "gpu", "nodes": 1, "devices": 4}]}
    good = {**data, "projects": [{"name": "nlp", "rate": 2, "burst": 3}]}
    _, _, quotas = clusterfile.build(good)
    assert (quotas.projects["nlp"].rate, quotas.projects["nlp"].burst) == (2.0, 3)
    bad = {**data, "projects": [{"name": "nlp", "rate": "fast"}]}
    error = refused(lambda: clusterfile.build(bad))
    assert "projects[0]" in str(error) and "rate must be requests per second" in str(error)


def test_a_tenant_with_every_seat_taken_waits_while_another_is_served(
    tmp_path: Path, cluster_file: Path
) -> None:
    """One token's requests in progress are at most ``seats_per_token`` (1): its next waits
    for it; another tenant's waits at most a slice beside a request stuck in the service
    (xirang_service/web/turns.py), then is answered."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool, SeatsHeld(pool) as held:
        third = held.ask("third", "nlp", "/v1/queue")
        began = time.monotonic()
        assert pool.client("cv").call("GET", "/v1/queue") == []  # another tenant: answered
        assert pool.client("operator").call("GET", "/v1/status")["queued"] == 0
        assert time.monotonic() - began < 5
        assert third.is_alive() and "third" not in held.answers  # nlp's next waits for a seat
        held.release.set()
        for thread in [*held.threads, third]:
            thread.join(30)
        assert held.answers["third"] == [] and all(
            held.answers[f"held{i}"] == [] for i in range(SEATS)
        )
        assert pool.client("nlp").call("GET", "/v1/queue") == []  # its seats are free again


def test_a_request_over_the_rate_is_refused_at_the_gate_without_waiting_for_a_seat(
    tmp_path: Path, cluster_file: Path
) -> None:
    """The rate is counted before a request is seated: a tenant looping past its rate costs
    the service a header look-up per request, and its refusals never queue for its seats."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        pool.client("operator").call("PUT", "/v1/projects/nlp", {"rate": 0.01, "burst": SEATS})
        with SeatsHeld(pool) as held:  # its seats held by its burst
            status, headers, answer = _get(pool, "nlp")  # at once, though no seat is free
            assert status == 429 and "over its request rate" in answer["error"]
            assert int(headers["retry-after"]) >= 1
            held.release.set()


class SeatsHeld:
    """Every seat of nlp's held by reads of ``GET /v1/jobs`` kept waiting inside the service
    until ``release`` is set."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.release = pool, threading.Event()
        self.answers: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> SeatsHeld:
        entered, jobs = threading.Semaphore(0), self.pool.service.jobs

        def slow_jobs(who: str, state: str = "", priced: bool = True) -> list[dict[str, Any]]:
            entered.release()
            self.release.wait(30)
            return jobs(who, state, priced)

        self.pool.service.jobs = slow_jobs
        self.threads = [self.ask(f"held{i}", "nlp", "/v1/jobs") for i in range(SEATS)]
        for _ in self.threads:
            assert entered.acquire(timeout=30)  # every seat of nlp's is taken
        return self

    def ask(self, name: str, who: str, path: str) -> threading.Thread:
        def run() -> None:
            self.answers[name] = self.pool.client(who).call("GET", path)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        for thread in self.threads:
            thread.join(30)


def test_a_repeated_read_answers_each_change_at_once(tmp_path: Path, cluster_file: Path) -> None:
    """Reads are picked once per published view: the next change is seen by the next read."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        nlp = pool.client("nlp")
        assert (
            nlp.call("GET", "/v1/jobs?state=running")
            == nlp.call("GET", "/v1/jobs?state=running")
            == []
        )
        job = nlp.submit(cards=1)
        assert [j["id"] for j in nlp.call("GET", "/v1/jobs?state=running")] == [job["id"]]
        nlp.cancel(job["id"])
        assert nlp.call("GET", "/v1/jobs?state=running") == []
        assert [j["state"] for j in nlp.call("GET", "/v1/jobs")] == ["cancelled"]
        assert pool.client("cv").call("GET", "/v1/jobs") == []  # picked per asker
