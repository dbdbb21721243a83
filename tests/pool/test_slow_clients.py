"""Slow clients cannot deny service, on the pool API and on the console's ``/login``: hundreds
of connections from one address that send a valid head and then drip their bodies (a byte at a
time, each within the chunk timeout) hold at most that address's share of connections, and
legitimate clients elsewhere are answered meanwhile; a dripped body is cut at the whole-body
deadline, not after its whole Content-Length. Real sockets on loopback (the attacker sends from
127.0.0.2, the legitimate clients from 127.0.0.1; the whole 127/8 is loopback)."""

from __future__ import annotations

import http.client
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.pool.web import served
from xirang_service.console.metrics_store import MetricsStore
from xirang_service.console.server import serve as serve_console
from xirang_service.console.source import ConsoleSource
from xirang_service.cost.store import CostStore
from xirang_service.pool.store import PoolStore
from xirang_service.web.server import Limits

ATTACKER = "127.0.0.2"
#: the attack outnumbers the server's connections; one address gets a small share of them
LIMITS = Limits(max_connections=200, max_per_client=40, read_timeout_s=2.0, body_timeout_s=3.0)


@contextmanager
def drip_attack(host: str, port: int, path: str, connections: int = 300) -> Iterator[None]:
    """``connections`` sockets from :data:`ATTACKER`, each a valid POST head announcing a
    10,000-byte body, then a byte of it every 0.5 s; a socket the server closes is opened
    again, so the attack keeps its numbers."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 10000\r\n\r\n"
    ).encode()
    stop = threading.Event()

    def open_one() -> socket.socket | None:
        try:
            sock = socket.create_connection((host, port), timeout=2, source_address=(ATTACKER, 0))
            sock.sendall(head)
            return sock
        except OSError:
            return None

    def attack() -> None:
        socks = [open_one() for _ in range(connections)]
        while not stop.wait(0.5):
            for i, sock in enumerate(socks):
                try:
                    assert sock is not None
                    sock.sendall(b" ")
                except (OSError, AssertionError):
                    if sock is not None:
                        sock.close()
                    socks[i] = open_one()
        for sock in socks:
            if sock is not None:
                sock.close()

    thread = threading.Thread(target=attack, daemon=True)
    thread.start()
    try:
        stop.wait(2.0)  # the attack's connections are open and dripping
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def answered_meanwhile(host: str, port: int, path: str, asks: Callable[[], int]) -> list[int]:
    """The statuses 60 legitimate requests (``asks``, from 4 threads) get during an attack."""
    statuses: list[int] = []
    with drip_attack(host, port, path):

        def client() -> None:
            for _ in range(15):
                try:
                    statuses.append(asks())
                except OSError as exc:
                    statuses.append(-1)
                    print("legitimate request failed:", exc)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return statuses


def ask(host: str, port: int, method: str, path: str, body: bytes, headers: dict) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body or None, headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_drip_fed_bodies_do_not_deny_the_pool_to_others(tmp_path: Path, cluster_file: Path) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file, LIMITS) as pool:
        token = {"Authorization": f"Bearer {pool.tokens['nlp']}"}
        submit = {**token, "Content-Type": "application/json"}
        calls = iter(range(10**6))

        def asks() -> int:
            if next(calls) % 2:
                return ask(pool.host, pool.port, "GET", "/v1/status", b"", token)
            return ask(pool.host, pool.port, "POST", "/v1/jobs", b'{"cards": 1}', submit)

        statuses = answered_meanwhile(pool.host, pool.port, "/v1/jobs", asks)
        assert sorted(set(statuses)) == [200, 201] and len(statuses) == 60
        assert len(pool.service.jobs("nlp")) == 30  # every submit made its job


def test_drip_fed_logins_do_not_deny_the_console_to_others(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        costs = CostStore(tmp_path / "cost.db")
        source = ConsoleSource(PoolStore(pool.service.store.path), costs, MetricsStore())
        console = serve_console(source, limits=LIMITS)
        thread = threading.Thread(target=console.serve_forever, daemon=True)
        thread.start()
        host, port = console.server_address[:2]
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        calls = iter(range(10**6))

        def asks() -> int:
            if next(calls) % 2:
                return ask(host, port, "GET", "/login", b"", {})
            return ask(host, port, "POST", "/login", b"token=x", form)  # no CSRF token: 403

        try:
            statuses = answered_meanwhile(host, port, "/login", asks)
        finally:
            console.shutdown()
            console.server_close()
            costs.close()
        assert sorted(set(statuses)) == [200, 403] and len(statuses) == 60


def test_a_dripped_body_is_cut_at_the_whole_body_deadline(
    tmp_path: Path, cluster_file: Path
) -> None:
    """Each byte comes well within the 2 s chunk timeout; the whole body would take 50 s."""
    limits = Limits(read_timeout_s=2.0, body_timeout_s=2.0)
    with served(str(tmp_path / "pool.db"), cluster_file, limits) as pool:
        head = b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        with socket.create_connection((pool.host, pool.port), timeout=15) as sock:
            sock.sendall(head)
            for _ in range(100):
                if select.select([sock], [], [], 0.5)[0]:
                    break  # the server answered
                sock.sendall(b" ")
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            body = answer.read().decode()
        assert answer.status == 408 and "all of it within 2 s" in body
        assert answer.getheader("connection") == "close"
