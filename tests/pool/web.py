"""A pool service on loopback for the web-stack tests: the real app on uvicorn, in a thread,
over a real store; and raw HTTP, for requests no well-behaved client sends."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang_service.pool.client import PoolClient
from xirang_service.pool.rest import LIMITS, serve
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore
from xirang_service.web.server import Limits

OPERATOR = "operator-secret-for-tests"


@dataclass
class Served:
    service: PoolService
    host: str
    port: int
    tokens: dict[str, str]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, who: str = "nlp", timeout: float = 30.0) -> PoolClient:
        return PoolClient(self.url, self.tokens[who], timeout)


@contextmanager
def served(
    state: str, cluster: Path | None, limits: Limits = LIMITS, **service: Any
) -> Iterator[Served]:
    """The service over ``state`` on a free port, with an operator and projects nlp, cv."""
    pool = PoolService(PoolStore(state), cluster, "priority", OPERATOR, **service)
    server = serve(pool, "127.0.0.1", 0, limits)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address
    operator = PoolClient(f"http://{host}:{port}", OPERATOR)
    tokens = {p: operator.call("PUT", f"/v1/projects/{p}", {})["token"] for p in ("nlp", "cv")}
    try:
        yield Served(pool, host, port, {**tokens, "operator": OPERATOR})
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        pool.store.close()


def raw(served: Served, request: bytes, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    """Send ``request`` bytes as they are; the status and JSON answer."""
    with socket.create_connection((served.host, served.port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        body = answer.read()
    try:
        return answer.status, json.loads(body)
    except ValueError:
        return answer.status, {"error": body.decode(errors="replace")}


def post(path: str, body: bytes, token: str = "", extra: str = "") -> bytes:
    """A POST of ``body`` with its true Content-Length (unless ``extra`` sets one)."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if token:
        head += f"Authorization: Bearer {token}\r\n"
    head += extra or f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body
