"""An ASGI application served by uvicorn in this process, with the calls the CLI and the tests
already use on a server (``serve_forever()`` in a thread, ``shutdown()``, ``server_address``).

The socket is bound at construction, so ``port=0`` is resolved before serving starts, with a
listen backlog of 2048 (the standard library's was 5: 200 clients connecting at once saw
resets). uvicorn speaks HTTP through httptools (llhttp, in C) on uvloop where it is installed:
a small cached answer took 1.0-1.2 ms on loopback through h11 (pure Python) and asyncio's loop,
0.8-0.9 ms through httptools on uvloop. Header names go out in lower case, as HTTP/2 requires
and HTTP/1.1 allows.
llhttp refuses malformed framing (a negative or non-numeric Content-Length) before the app
sees it; :class:`_Protocol` adds what h11 did and llhttp does not: a request head over
``max_header_bytes`` is refused (400). Idle keep-alive connections close after
``keep_alive_s``; a connection that has not sent a whole request head within
``read_timeout_s`` is closed, so idle or slow clients hold a file descriptor for seconds,
never a worker thread; the body has ``body_timeout_s`` in all (:mod:`.limits`). An answer has a
send deadline: a client that reads it slower than it is written has ``send_timeout_s`` from
that moment to take it all, or the connection is cut and its unsent bytes dropped, so a client
that reads nothing holds one answer (a page, :mod:`.pages`) of memory for that long at most.

One client address holds at most ``max_per_client`` connections: more are answered 503 at
once and closed, so one host dripping a thousand bodies (each byte within the chunk timeout)
cannot fill ``max_connections`` and turn everyone else's requests into 503s.
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import socket
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class Limits:
    """What one client may hold of a server (documented in docs/pool.md, "Limits")."""

    max_body_bytes: int = 64 * 1024
    max_header_bytes: int = 16 * 1024
    #: connections (and requests in progress) served at once; more are answered 503
    max_connections: int = 4096
    #: connections one client address may hold at once; more are answered 503
    max_per_client: int = 256
    backlog: int = 2048
    keep_alive_s: float = 5.0
    #: to send a request's head, and then each chunk of its body
    read_timeout_s: float = 10.0
    #: to send a request's whole body, from the end of its head
    body_timeout_s: float = 10.0
    #: to take an answer, from the moment the client first reads slower than it is written
    #: (then the connection is cut and its unsent bytes dropped)
    send_timeout_s: float = 30.0
    #: the kernel's send buffer per connection (fixed, so not grown to 4 MiB for a client
    #: that does not read): what the send deadline cannot reach stays this small
    send_buffer_bytes: int = 256 * 1024
    #: requests of one token served at once; its others wait their turn (:mod:`.limits`)
    seats_per_token: int = 1


class WebServer:
    """``app`` on uvicorn at ``host:port`` (0 = any free port), bound now, served by
    :meth:`serve_forever` (blocking; run it in a thread) until :meth:`shutdown`."""

    def __init__(self, app: Any, host: str, port: int, limits: Limits = Limits()) -> None:
        self.limits = limits
        self._socket = _listen(host, port, limits.backlog)
        _allow_files(limits.max_connections + 256)  # the connections, the store, the logs
        bounds = {
            "read_timeout_s": limits.read_timeout_s,
            "send_timeout_s": limits.send_timeout_s,
            "send_buffer": limits.send_buffer_bytes,
            "max_head": limits.max_header_bytes,
            "max_per_client": limits.max_per_client,
            "clients": Counter(),  # this server's open connections by client address
        }
        config = uvicorn.Config(
            app,
            http=type("Protocol", (_Protocol,), bounds),
            loop="auto",  # uvloop where installed (not on Windows), else asyncio
            lifespan="off",
            log_level="warning",
            access_log=False,  # no tokens or noise in logs
            server_header=False,
            backlog=limits.backlog,
            limit_concurrency=limits.max_connections,
            timeout_keep_alive=int(limits.keep_alive_s),
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
    sys.setswitchinterval(SWITCH_INTERVAL_S)


#: how long a thread holding the interpreter's lock runs before one waiting for it may take it
#: (Python's default is 5 ms): a short request waiting behind another tenant's handlers takes
#: the lock several times, and at 5 ms a turn its answer took 6x its time alone
SWITCH_INTERVAL_S = 0.0005


def _allow_files(wanted: int) -> None:
    """Raise this process's open-file limit towards ``wanted`` (as far as its hard limit
    lets): a default soft limit of 1024 would fail accepts below ``max_connections``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class _HeadTooLarge(Exception):
    """Raised from a parser callback: httptools turns it into a parse error, which uvicorn
    answers 400 and closes the connection on."""


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with two bounds on each request head: its size (h11's
    ``max_incomplete_event_size``, which llhttp lacks) and a deadline to send it (uvicorn
    times out idle keep-alive connections, but not a client that connects and never, or
    slowly, sends)."""

    read_timeout_s = 10.0
    send_timeout_s = 30.0
    send_buffer = 256 * 1024
    #: bytes of request line and headers (each header counted with its ": " and CRLF)
    max_head = 16 * 1024
    max_per_client = 256
    clients: ClassVar[Counter[str]] = Counter()  # replaced by each server's own
    _client: str | None = None  # the address this connection counts against
    _deadline: asyncio.TimerHandle | None = None
    _stalled: asyncio.TimerHandle | None = None  # the send deadline of the answer being sent
    _head = 0  # bytes of the open head that the parser has handed over
    _raw = 0  # bytes of the open head received in chunks that held nothing else
    _in_head = True  # between requests or inside a head, so not in a body
    _heads = 0  # heads completed on this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if self.clients[client] >= self.max_per_client:
            return self._refuse(transport, client)
        self.clients[client] += 1
        self._client = client
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        self._arm()

    def _refuse(self, transport: asyncio.Transport, client: str) -> None:
        """A 503 naming the limit, then close: the client's address holds its share."""
        message = (
            f"too many connections from {client or 'this client'} "
            f"({self.max_per_client} at most per client address); close some and try again"
        )
        body = json.dumps({"error": message}).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def pause_writing(self) -> None:
        """The client reads slower than its answer is written (the transport holds more than
        its high-water mark): from now it has ``send_timeout_s`` to take the rest."""
        super().pause_writing()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.send_timeout_s, self._cut)

    def resume_writing(self) -> None:
        """The client caught up: the deadline ends once its answer is complete (one still
        being written keeps the deadline of its first stall, so a trickle does not reset it)."""
        super().resume_writing()
        done = self.cycle is None or self.cycle.response_complete
        if done and self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _cut(self) -> None:
        """The send deadline passed: a client still holding unsent bytes is cut off (abort, so
        what it did not take is dropped rather than kept for it)."""
        self._stalled = None
        if self.transport.get_write_buffer_size() and not self.transport.is_closing():
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
        if self._deadline is not None:
            self._deadline.cancel()
        if self._client is not None:
            self.clients[self._client] -= 1
            if not self.clients[self._client]:
                del self.clients[self._client]
            self._client = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed ``data``; a chunk that lay wholly inside one head counts towards its size.

        llhttp hands a header over only once it has ended, so one endless header, dripped, is
        bounded here (to the limit plus one read); whole heads by :meth:`on_url` and
        :meth:`on_header`."""
        inside, heads = self._in_head, self._heads
        super().data_received(data)
        if inside and self._in_head and heads == self._heads and not self.transport.is_closing():
            self._raw += len(data)
            if self._raw > self.max_head:
                self.send_400_response(f"request head over {self.max_head} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head = 0

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head, self._raw, self._heads = False, 0, self._heads + 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True
        super().on_message_complete()

    def _count(self, size: int) -> None:
        self._head += size
        if self._head > self.max_head:
            raise _HeadTooLarge(f"request head over {self.max_head} bytes")

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._expire)

    def _expire(self) -> None:
        """Close the connection if it still has not sent the whole head of its next request
        (``cycle`` is the last request whose head is complete; one being served, or waiting
        behind another, is never cut)."""
        waiting = self.cycle is None or self.cycle.response_complete
        if waiting and not self.transport.is_closing():
            self.transport.close()
