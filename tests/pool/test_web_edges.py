"""The pool's web edges against hostile and broken clients, one test per finding of issue 15:
text a database cannot store, a fractional usage bucket, a negative Content-Length, idle
connections and a crowd of concurrent clients."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tests.pool.web import OPERATOR, post, raw, served
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.rest import LIMITS
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.web.fields import MAX_TEXT, Text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@given(st.text(st.characters(exclude_categories=()), max_size=MAX_TEXT + 20))
def test_text_is_accepted_exactly_when_every_store_can_hold_it(value: str) -> None:
    try:
        value.encode("utf-8")
        storable = "\x00" not in value and len(value) <= MAX_TEXT
    except UnicodeEncodeError:
        storable = False
    try:
        TypeAdapter(Text).validate_python(value)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == storable


@pytest.mark.parametrize("bad", [r"\ud800", r"bert\u0000"])
@pytest.mark.parametrize("field", ["name", "job_class"])
def test_text_a_store_cannot_hold_is_refused_naming_the_field(
    store_location: str, cluster_file: Path, field: str, bad: str
) -> None:
    with served(store_location, cluster_file) as pool:
        body = f'{{"cards": 1, "{field}": "{bad}"}}'.encode()
        status, answer = raw(pool, post("/v1/jobs", body, pool.tokens["nlp"]))
        assert status == 400 and answer["error"].startswith(f"{field}: ")
        assert "unicode" in answer["error"].lower()
        assert pool.service.jobs(OPERATOR_WHO) == []
        job = pool.client().submit(cards=1, name="fine")  # and the pool serves on
        assert pool.client().cancel(job["id"])["state"] == "cancelled"


def test_a_payload_field_the_meter_reads_is_typed_at_submit(tmp_path, cluster_file) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        with pytest.raises(PoolError, match=r"payload\.utilisation") as err:
            pool.client().submit(cards=1, payload={"utilisation": "abc"})
        assert err.value.status == 400
        with pytest.raises(PoolError, match="payload: must be valid Unicode text; it holds NUL"):
            pool.client().submit(cards=1, payload={"note": "\x00"})


@pytest.mark.parametrize("command", [5, "echo hi", [], ["echo", 5], [None]])
def test_what_a_job_runs_is_typed_at_submit_not_at_a_scheduling_pass(
    tmp_path, cluster_file, command
) -> None:
    """A command an executor cannot run is refused naming payload.command, and nothing is
    stored that a later pass (or a restart) would choke on; a list of strings is taken."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        with pytest.raises(PoolError, match=r"payload\.command") as err:
            pool.client().submit(cards=1, payload={"command": command})
        assert err.value.status == 400
        with pytest.raises(PoolError, match="payload: command must be a non-empty list"):
            pool.service.submit("nlp", {"cards": 1, "payload": {"command": command}})
        assert pool.service.jobs(OPERATOR_WHO) == []
        job = pool.client().submit(cards=1, payload={"command": ["bash", "-c", "true"]})
        pool.service.tick()
        assert pool.client().job(job["id"])["state"] == "running"


def test_a_fractional_or_tiny_usage_bucket_is_refused_at_once(tmp_path, cluster_file) -> None:
    clock = Clock()
    with served(str(tmp_path / "pool.db"), cluster_file, clock=clock) as pool:
        operator = PoolClient(pool.url, OPERATOR, timeout=5)
        job = pool.client().submit(cards=4)
        clock.now += 7200
        operator.complete(job["id"], ok=True)
        for bucket in ("0.1", "1e-300", "1"):
            with pytest.raises(PoolError, match="bucket") as err:
                operator.call("GET", f"/v1/usage?bucket={bucket}")
            assert err.value.status == 400
        usage = operator.call("GET", "/v1/usage?bucket=3600")
        assert sum(u["device_seconds"] for u in usage) == 4 * 7200


def test_bodies_without_a_sound_length_are_refused_before_the_token(tmp_path, cluster_file) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        negative = post("/v1/jobs", b'{"cards": 1}', extra="Content-Length: -1\r\n")
        assert raw(pool, negative)[0] == 400  # no token: refused before it was looked at
        chunked = post(
            "/v1/jobs", b'c\r\n{"cards": 1}\r\n0\r\n\r\n', extra="Transfer-Encoding: chunked\r\n"
        )
        status, answer = raw(pool, chunked)
        assert status == 411 and "Content-Length" in answer["error"]
        huge = post("/v1/jobs", b"", extra=f"Content-Length: {10**12}\r\n")
        status, answer = raw(pool, huge)
        assert status == 413 and "over the" in answer["error"]
        assert pool.service.jobs(OPERATOR_WHO) == []


def test_idle_connections_are_closed_and_do_not_pin_the_service(tmp_path, cluster_file) -> None:
    limits = type(LIMITS)(read_timeout_s=1.0)
    with served(str(tmp_path / "pool.db"), cluster_file, limits) as pool:
        idle = [socket.create_connection((pool.host, pool.port)) for _ in range(150)]
        idle[0].sendall(b"GET /v1/status HTTP/1.1\r\n")  # a head that never ends
        started = time.monotonic()
        assert pool.client().call("GET", "/v1/status")["queued"] == 0
        assert time.monotonic() - started < 2.0
        for sock in idle:
            sock.settimeout(10)
            assert sock.recv(1) == b""  # the server hung up on it
            sock.close()
        assert time.monotonic() - started < 10.0


def test_two_hundred_concurrent_clients_see_no_reset(tmp_path, cluster_file) -> None:
    """(http.server's backlog of 5 made some of them wait out SYN retries for 30 s.)"""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        start, errors, answers = threading.Barrier(200), [], []

        def client(i: int) -> None:
            start.wait()
            try:
                answers.append(pool.client(timeout=15).call("GET", "/v1/status"))
            except (OSError, PoolError) as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(200)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and len(answers) == 200


def test_a_handler_bug_is_a_500_for_that_request_alone(tmp_path, cluster_file, caplog) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        broken = pool.service.status
        pool.service.status = lambda who: 1 / 0  # type: ignore[method-assign]
        with pytest.raises(PoolError, match="internal error: ZeroDivisionError") as err:
            pool.client().call("GET", "/v1/status")
        assert err.value.status == 500
        assert "internal error answering GET /v1/status" in caplog.text
        pool.service.status = broken  # type: ignore[method-assign]
        assert pool.client().call("GET", "/v1/status")["you"] == "nlp"
