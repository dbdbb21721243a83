"""A bounded load test of ``xirang pool serve`` on loopback: many concurrent clients submit,
read and cancel jobs while the service is killed with SIGKILL and restarted; no answer is an
error, no connection is reset while the service is up, every restart serves, and every job
whose submission was acknowledged is in the store exactly once (a cancel acknowledged, stored
as cancelled).

CI runs 200 clients for 10 s with 3 kills; the issue's full run is
``XIRANG_LOAD_S=60 XIRANG_LOAD_KILLS=10 python -m pytest tests/pool/test_load.py -s``, which
prints requests/s and the p99 latency.
"""

from __future__ import annotations

import collections
import http.client
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xirang_service.pool.client import LostAnswer, PoolClient
from xirang_service.pool.errors import PoolError

LOAD_S = float(os.environ.get("XIRANG_LOAD_S", "10"))
KILLS = int(os.environ.get("XIRANG_LOAD_KILLS", "3"))
CLIENTS = int(os.environ.get("XIRANG_LOAD_CLIENTS", "200"))
OPERATOR = "load-operator"

pytestmark = pytest.mark.slow


class Service:
    """``xirang pool serve`` in its own process, on one port across restarts."""

    def __init__(self, folder: Path, cluster: Path) -> None:
        self.folder, self.cluster = folder, cluster
        self.store = folder / "pool.db"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.generation = 0
        self.down = threading.Event()

    def start(self) -> None:
        env = {
            **os.environ,
            "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR,
            "XIRANG_HOME": str(self.folder),
        }
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--cluster", str(self.cluster)]
        command += ["--store", str(self.store), "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        operator = PoolClient(self.url, OPERATOR, timeout=5)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                operator.call("GET", "/v1/status")
                return
            except (PoolError, OSError):
                assert self.process.poll() is None, "the service exited at start"
                time.sleep(0.1)
        raise AssertionError("the restarted service did not serve within 120 s")

    def kill(self) -> None:
        self.down.set()
        self.generation += 1
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, int] = field(default_factory=dict)
    cancelled: set[int] = field(default_factory=set)
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def test_clients_under_load_and_kills_lose_and_duplicate_nothing(tmp_path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("groups: [{type: gpu, nodes: 4, devices: 8, prefix: n}]\n")
    service = Service(tmp_path, cluster)
    service.start()
    try:
        token = PoolClient(service.url, OPERATOR).call("PUT", "/v1/projects/nlp", {})["token"]
        tally, stop = Tally(), threading.Event()
        clients = [
            threading.Thread(target=_client, args=(i, service, token, stop, tally))
            for i in range(CLIENTS)
        ]
        started = time.monotonic()
        for thread in clients:
            thread.start()
        for _ in range(KILLS):
            time.sleep(LOAD_S / (KILLS + 1))
            service.kill()
            service.start()
            service.down.clear()
        time.sleep(LOAD_S / (KILLS + 1))
        stop.set()
        for thread in clients:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        service.stop()
    _report(tally, elapsed)
    assert tally.failures == []
    rows = sqlite3.connect(service.store).execute("SELECT id, name, state FROM jobs").fetchall()
    by_name = collections.defaultdict(list)
    for job_id, name, state in rows:
        by_name[name].append((job_id, state))
    assert max(len(v) for v in by_name.values()) == 1  # nothing stored twice
    assert all(by_name[name][0][0] == job_id for name, job_id in tally.acked.items())
    states = {job_id: state for job_id, _, state in rows}
    assert all(states[job_id] == "cancelled" for job_id in tally.cancelled)
    assert len(tally.acked) > CLIENTS  # the clients did get through


def _client(i: int, service: Service, token: str, stop: threading.Event, tally: Tally) -> None:
    """Submit, read and cancel, again and again; a connection error (refused, reset, an answer
    cut short) counts only if the service was down when the requests began, or went down
    during them. Both are read before the requests: a thread may run its error handler only
    after the restart, and must not then blame the service that came back (the generation is
    read first, as a kill raises the flag before it counts the generation)."""
    client = PoolClient(service.url, token, timeout=30)
    n = 0
    while not stop.is_set():
        name, generation = f"c{i}-{n}", service.generation
        was_down = service.down.is_set()
        n += 1
        try:
            job = _timed(tally, client.submit, cards=1, name=name)
            with tally.lock:
                tally.acked[name] = job["id"]
            _timed(tally, client.job, job["id"])
            _timed(tally, client.cancel, job["id"])
            with tally.lock:
                tally.cancelled.add(job["id"])
        except (PoolError, OSError, http.client.HTTPException) as exc:
            lost = isinstance(exc, LostAnswer) or not isinstance(exc, PoolError)
            unreachable = lost or "cannot reach" in str(exc)
            if not unreachable or not (was_down or generation != service.generation):
                with tally.lock:
                    tally.failures.append(f"{name}: {exc!r}")
            time.sleep(0.05)


def _timed(tally: Tally, call, *args, **kwargs):
    started = time.perf_counter()
    answer = call(*args, **kwargs)
    with tally.lock:
        tally.seconds.append(time.perf_counter() - started)
    return answer


def _report(tally: Tally, elapsed: float) -> None:
    ordered = sorted(tally.seconds)
    p99 = ordered[int(0.99 * (len(ordered) - 1))] * 1000 if ordered else float("nan")
    print(
        f"\nload: {CLIENTS} clients, {elapsed:.0f} s, {KILLS} kill -9: {len(ordered)} requests, "
        f"{len(ordered) / elapsed:.0f} requests/s, p99 {p99:.0f} ms, "
        f"{len(tally.acked)} jobs acknowledged"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
