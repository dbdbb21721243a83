"""Two ``xirang pool serve`` replicas on one PostgreSQL (a throwaway cluster, real processes and
sockets): one leads by the store's advisory lock, the other answers 503 naming the leader;
kill -9 the leader and the standby takes over with every acknowledged job intact, and a
client given both URLs carries on. A replica whose connection was cut can no longer write
(fencing). An SQLite store refuses a second server."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.pool import postgres
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import LEADER_HEADER, PoolError, StoreUnavailable
from xirang_service.pool.replica import LEADER_KEY
from xirang_service.pool.replica import Replica as StandbyReplica
from xirang_service.pool.rest import serve_replica
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

OPERATOR = "replicas-operator"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, path: str = "/v1/status") -> tuple[int, dict[str, str], dict]:
    """One GET as the operator: status, headers (lower-case names), JSON answer."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {OPERATOR}"})
        answer = conn.getresponse()
        headers = {k.lower(): v for k, v in answer.getheaders()}
        return answer.status, headers, json.loads(answer.read())
    finally:
        conn.close()


class Replica:
    """One ``xirang pool serve`` process on its own port."""

    def __init__(self, home: Path, store: str, cluster: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "XIRANG_HOME": str(home), "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR}
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--store", store]
        command += ["--cluster", str(cluster), "--port", str(self.port)]
        self.log = home / f"serve-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)

    def answering(self) -> int:
        """Wait until it answers at all; the status of GET /v1/status (200 or 503)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                return _get(self.url)[0]
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{self.url} never answered:\n{self.log.read_text()}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@contextmanager
def replicas(home: Path, store: str, cluster: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    try:
        started.append(Replica(home, store, cluster))
        assert started[0].answering() == 200  # the first takes the lease
        started.append(Replica(home, store, cluster))
        assert started[1].answering() == 503
        yield started
    finally:
        for replica in started:
            if replica.process.poll() is None:
                replica.kill()


@pytest.mark.service
def test_kill_9_of_the_leader_hands_the_pool_to_the_standby_with_every_acked_job(
    postgres_cluster: str, cluster_file: Path, tmp_path: Path
) -> None:
    store = postgres.fresh_database(postgres_cluster, "replicas_failover")
    with replicas(tmp_path, store, cluster_file) as (leader, standby):
        status, headers, answer = _get(standby.url)
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert headers[LEADER_HEADER.lower()] == leader.url and answer["leader"] == leader.url
        assert "standby" in answer["error"] and leader.url in answer["error"]

        urls = [standby.url, leader.url]  # the standby first: the client follows the header
        operator = PoolClient(urls, OPERATOR)
        token = operator.call("PUT", "/v1/projects/nlp", {})["token"]
        nlp = PoolClient(urls, token)
        acked = [nlp.submit(cards=1, name=f"before-{i}") for i in range(6)]
        nlp.cancel(acked[0]["id"])
        assert nlp.url == leader.url

        leader.kill()
        after = nlp.submit(cards=1, name="after")  # retried until the standby leads
        assert nlp.url == standby.url
        seen = {job["id"]: job for job in nlp.call("GET", "/v1/jobs")}
        assert set(seen) == {job["id"] for job in [*acked, after]}
        assert seen[acked[0]["id"]]["state"] == "cancelled"
        assert {seen[j["id"]]["state"] for j in acked[1:]} <= {"running", "queued"}
        assert after["id"] not in {job["id"] for job in acked}  # no id taken twice

        back = Replica(tmp_path, store, cluster_file)  # the old leader, restarted: stands by
        try:
            assert back.answering() == 503
            assert _get(back.url)[1][LEADER_HEADER.lower()] == standby.url
        finally:
            back.kill()


@pytest.mark.service
def test_a_replica_whose_connection_was_cut_can_no_longer_write(
    postgres_cluster: str, cluster_file: Path
) -> None:
    location = postgres.fresh_database(postgres_cluster, "replicas_fencing")
    first, second = PoolStore(location), PoolStore(location)
    try:
        assert first.db.try_lead() and not second.db.try_lead()
        pool = PoolService(first, cluster_file, "priority", OPERATOR)
        pool.set_quota(OPERATOR_WHO, "nlp", {})
        with psycopg.connect(postgres_cluster.replace("/postgres?", "/replicas_fencing?")) as db:
            pid = first.db.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
            db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 30
        while not second.db.try_lead():  # the lease died with the session
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert not first.db.leads()
        with pytest.raises(StoreUnavailable, match="lost its leader lease"):
            pool.submit("nlp", {"cards": 1})  # its connection is back, its lease is not
        assert [job.name for job in second.jobs()] == []
    finally:
        first.close()
        second.close()


@pytest.mark.service
def test_a_standby_waiting_for_the_lease_is_granted_it_when_the_leader_goes(
    postgres_cluster: str,
) -> None:
    """A standby waits for the lease in PostgreSQL, which grants it the moment the leader's
    session ends: the failover does not wait for the standby's next try."""
    location = postgres.fresh_database(postgres_cluster, "replicas_waiting")
    leader, standby = PoolStore(location), PoolStore(location)
    won: list[bool] = []
    try:
        assert leader.db.try_lead() and not standby.db.try_lead(wait_s=0.05)
        waiting = threading.Thread(target=lambda: won.append(standby.db.try_lead(wait_s=600)))
        waiting.start()
        with psycopg.connect(location) as monitor:
            while not monitor.execute(WAITING_FOR_LEASE).fetchone()[0]:
                assert waiting.is_alive(), "the standby stopped waiting while the lease was held"
                time.sleep(0.02)
        leader.close()  # the leader's session ends: its lease with it
        waiting.join(timeout=60)
        assert won == [True] and standby.db.leads()
        lock_timeout = standby.db.execute("SHOW lock_timeout").fetchone()["lock_timeout"]
        assert lock_timeout == "0"  # the wait's timeout was its own, not the leader's session's
    finally:
        leader.close()
        standby.close()


@pytest.mark.service
def test_a_client_pauses_between_rounds_while_the_standby_names_a_dead_leader(
    postgres_cluster: str, cluster_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after a kill -9 the standby still names the dead leader: a client following it
    waits between rounds, not asking both again at once (from many clients, that loaded the
    standby while it took over)."""
    location = postgres.fresh_database(postgres_cluster, "replicas_pausing")
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there: refused
    holder = PoolStore(location)
    assert holder.db.try_lead()
    holder.set_meta(LEADER_KEY, dead)
    build = partial(PoolService, cluster_file=cluster_file, operator_token=OPERATOR)
    standby = StandbyReplica(PoolStore(location), partial(PoolStore, location), build, "")
    server = serve_replica(standby, "127.0.0.1", 0)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        standby.url = "http://{}:{}".format(*server.server_address)
        standby.step()
        assert standby.service is None and standby.leader == dead
        sent: list[str] = []
        once = PoolClient._once

        def counted(client: PoolClient, *args: Any) -> Any:
            sent.append(client.url)
            return once(client, *args)

        monkeypatch.setattr(PoolClient, "_once", counted)
        with pytest.raises(PoolError):
            PoolClient([standby.url, dead], OPERATOR, retry_s=1.0).call("GET", "/v1/status")
        assert set(sent) == {standby.url, dead}  # it followed the named leader
        assert len(sent) <= 15, f"{len(sent)} requests in 1 s: no pause between rounds"
    finally:
        server.shutdown()
        server.server_close()
        standby.close()
        holder.close()


#: whether a session waits for an advisory lock another holds
WAITING_FOR_LEASE = "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


def test_a_second_server_on_one_sqlite_store_is_refused(cluster_file: Path, tmp_path: Path) -> None:
    state = str(tmp_path / "pool.db")
    first = Replica(tmp_path, state, cluster_file)
    try:
        assert first.answering() == 200
        env = {**os.environ, "XIRANG_HOME": str(tmp_path), "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR}
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--store", state]
        second = subprocess.run(
            [*command, "--port", str(_free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode != 0
        assert "xirang error:" in second.stderr and "served by another" in second.stderr
        assert "Traceback" not in second.stderr
        assert _get(first.url)[0] == 200  # the first serves on
    finally:
        first.kill()
