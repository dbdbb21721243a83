"""Submitting through a lossy connection: an idempotency key makes a retry answer the job the
first attempt made (kept per project, across restarts), and a lost answer is a PoolError that
says what failed, never a raw ``RemoteDisconnected``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.pool.web import OPERATOR, served
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore


def test_the_same_key_makes_one_job_per_project_across_a_restart(
    store_location: str, cluster_file: Path
) -> None:
    state = store_location
    with served(state, cluster_file) as pool:
        first = pool.client("nlp").submit(key="run-42", cards=1, name="a")
        again = pool.client("nlp").submit(key="run-42", cards=1, name="a")
        other = pool.client("cv").submit(key="run-42", cards=1, name="a")
        fresh = pool.client("nlp").submit(cards=1, name="a")
        assert again["id"] == first["id"]
        assert len({first["id"], other["id"], fresh["id"]}) == 3
        assert len(pool.service.jobs(OPERATOR_WHO)) == 3
    restarted = PoolService(PoolStore(state), None, "priority", OPERATOR)
    try:
        after = restarted.submit("nlp", {"cards": 1, "name": "a"}, key="run-42")
        assert after["id"] == first["id"] and len(restarted.jobs(OPERATOR_WHO)) == 3
    finally:
        restarted.store.close()


def test_a_different_request_under_a_used_key_is_422_naming_the_job(
    store_location: str, cluster_file: Path
) -> None:
    with served(store_location, cluster_file) as pool:
        nlp = pool.client("nlp")
        first = nlp.submit(key="run-7", cards=1, name="a", payload={"lr": 0.1})
        with pytest.raises(PoolError) as err:
            nlp.submit(key="run-7", cards=2, name="a", payload={"lr": 0.1})
        assert err.value.status == 422
        assert f"job {first['id']}" in str(err.value) and "new key" in str(err.value)
        with pytest.raises(PoolError, match="different request"):
            nlp.submit(key="run-7", cards=1, name="a", payload={"lr": 0.2})
        assert nlp.submit(key="run-7", cards=1, name="a", payload={"lr": 0.1})["id"] == first["id"]
        assert len(pool.service.jobs(OPERATOR_WHO)) == 1


@contextmanager
def dropping_proxy(host: str, port: int, drops: int) -> Iterator[str]:
    """A loopback proxy to the real service that passes each request on and, for the first
    ``drops`` connections, closes on the client instead of passing the answer back (an
    acknowledgement lost on the way); the URL to send to."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # so the relay sees ``stop`` (a closed listener wakes no accept)
    stop = threading.Event()
    dropped = 0

    def relay() -> None:
        nonlocal dropped
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            with client, socket.create_connection((host, port)) as upstream:
                upstream.sendall(_message(client))
                answer = _message(upstream)
                if dropped < drops:
                    dropped += 1
                    continue
                client.sendall(answer)

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _message(sock: socket.socket) -> bytes:
    """One whole HTTP message (head, and a body of its Content-Length) read from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = int(lengths[0].split(b":")[1]) if lengths else 0
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_submission_whose_answer_is_lost_is_retried_into_one_job(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        with dropping_proxy(pool.host, pool.port, drops=2) as url:
            job = PoolClient(url, pool.tokens["nlp"]).submit(cards=1, name="once")
        assert [j["id"] for j in pool.service.jobs(OPERATOR_WHO)] == [job["id"]]


def test_an_answer_lost_every_time_is_a_pool_error_naming_the_request(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        with dropping_proxy(pool.host, pool.port, drops=10) as url:
            client = PoolClient(url, pool.tokens["nlp"])
            with pytest.raises(PoolError, match=r"lost the connection .* during POST /v1/jobs"):
                client.submit(cards=1, name="never acknowledged")
            with pytest.raises(PoolError, match=r"during GET /v1/status"):
                client.call("GET", "/v1/status")
        assert len(pool.service.jobs(OPERATOR_WHO)) == 1, "three attempts, one job"
