"""An ASGI application served by uvicorn in this process, with the calls the CLI and the tests
already use on a server (``serve_forever()`` in a thread, ``shutdown()``, ``server_address``).

The socket is bound at construction, so ``port=0`` is resolved before serving starts, with a
listen backlog of 2048 (the standard library's was 5: 200 clients connecting at once saw
resets). uvicorn speaks HTTP through h11, which refuses malformed framing (a negative or
non-numeric Content-Length) and headers over ``max_header_bytes`` before the app sees them.
Idle keep-alive connections close after ``keep_alive_s``; a connection that has not sent a
whole request head within ``read_timeout_s`` is closed (:class:`_Protocol`), so idle or slow
clients hold a file descriptor for seconds, never a worker thread.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class Limits:
    """What one client may hold of a server (documented in docs/pool.md, "Limits")."""

    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 16 * 1024
    #: connections (and requests in progress) served at once; more are answered 503
    max_connections: int = 1024
    backlog: int = 2048
    keep_alive_s: float = 5.0
    #: to send a request's head, and then each chunk of its body
    read_timeout_s: float = 10.0


class WebServer:
    """``app`` on uvicorn at ``host:port`` (0 = any free port), bound now, served by
    :meth:`serve_forever` (blocking; run it in a thread) until :meth:`shutdown`."""

    def __init__(self, app: Any, host: str, port: int, limits: Limits = Limits()) -> None:
        self.limits = limits
        self._socket = _listen(host, port, limits.backlog)
        protocol = type("Protocol", (_Protocol,), {"read_timeout_s": limits.read_timeout_s})
        config = uvicorn.Config(
            _HeaderCase(app),
            http=protocol,
            loop="asyncio",
            lifespan="off",
            log_level="warning",
            access_log=False,  # no tokens or noise in logs
            server_header=False,
            backlog=limits.backlog,
            limit_concurrency=limits.max_connections,
            timeout_keep_alive=int(limits.keep_alive_s),
            h11_max_incomplete_event_size=limits.max_header_bytes,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._started = threading.Event()
        self._stopped = threading.Event()

    @property
    def server_address(self) -> tuple[str, int]:
        return self._socket.getsockname()[:2]

    def serve_forever(self) -> None:
        self._started.set()
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and wait until the requests in progress have been answered."""
        self._server.should_exit = True
        if self._started.is_set():
            self._stopped.wait()

    def server_close(self) -> None:
        self._socket.close()


def settle_heap() -> None:
    """Collect once, then freeze what is alive (the restored service, the web stack) out of
    the garbage collector's full passes; call it after the state is built, before serving.

    A large answer (2,500 jobs) allocates tens of thousands of short-lived objects; every few
    dozen such requests the collector ran a full pass over the whole heap, which put 200 ms on
    one request in twenty (``GET /v1/jobs`` p95 of 220 ms against a median of 50, loaded)."""
    gc.collect()
    gc.freeze()


class _HeaderCase:
    """Header names sent as ``Content-Type`` rather than Starlette's ``content-type``: the
    same to HTTP, but what the standard library's server sent, and what clients that keep
    headers in a plain dict look up."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_cased(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [(_cased(k), v) for k, v in message.get("headers", ())]
            await send(message)

        await self.app(scope, receive, send_cased)


def _cased(name: bytes) -> bytes:
    return b"-".join(part.capitalize() for part in name.split(b"-"))


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head: uvicorn times out idle
    keep-alive connections, but not a client that connects and never (or slowly) sends."""

    read_timeout_s = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._expire)

    def _expire(self) -> None:
        """Close the connection if it still has not sent the whole head of its next request
        (h11 leaves IDLE once a head is complete; a request being served is never cut)."""
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
