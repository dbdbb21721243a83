"""Request-body limits, enforced before routing (so before any token is checked or any body is
parsed): a body needs a Content-Length (no chunked uploads) of at most ``max_body_bytes``, each
chunk of it must arrive within ``read_timeout_s`` and all of it within ``body_timeout_s`` of
the head's end (a client dripping a byte per chunk timeout is cut there, not after its whole
Content-Length). Refusals are the APIs' usual ``{"error": message}`` JSON: 411, 413, 408 (which
closes the connection)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from xirang_service.web.server import Limits

Scope = dict[str, Any]
BODY_METHODS = ("POST", "PUT", "PATCH")


class BodyLimit:
    """ASGI middleware: the body rules above, for the wrapped ``app``."""

    def __init__(self, app: Any, limits: Limits) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self._refusal(scope)
        if refusal is not None:
            return await _answer(send, *refusal)
        return await self.app(scope, self._timed(receive, send), send)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = dict(scope["headers"])
        if b"transfer-encoding" in headers:
            return 411, "chunked request bodies are not accepted; send a Content-Length"
        length = headers.get(b"content-length")
        if length is None:
            if scope["method"] in BODY_METHODS:
                return 411, f"{scope['method']} needs a Content-Length header"
            return None
        size = int(length)  # llhttp has refused anything but digits already
        limit = self.limits.max_body_bytes
        if size > limit:
            return 413, f"request body of {size} bytes is over the {limit} limit"
        return None

    def _timed(self, receive: Any, send: Any) -> Any:
        chunk, whole = self.limits.read_timeout_s, self.limits.body_timeout_s
        loop = asyncio.get_running_loop()
        deadline, done = loop.time() + whole, False

        async def receive_in_time() -> dict[str, Any]:
            nonlocal done
            if done:  # the body is in: what follows (a disconnect) is not the body's time
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), min(chunk, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise BodyTimeout(
                    f"the request body did not arrive in time (each part within {chunk:g} s, "
                    f"all of it within {whole:g} s)"
                ) from None
            done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        return receive_in_time


class BodyTimeout(HTTPException):
    """A client stopped sending its request body: 408 (an HTTPException, so FastAPI's body
    reader passes it on instead of calling it a parse error)."""

    def __init__(self, message: str) -> None:
        super().__init__(408, message, headers={"Connection": "close"})


#: why a request is refused before the application sees it: (status, message, headers)
Refusal = tuple[int, str, dict[str, str]]
#: the tenant gate's check: the ``Authorization`` header's value and the request's state
#: (``scope["state"]``, Starlette's ``request.state``: where it may leave who the caller is,
#: so the application does not resolve the token again) -> a refusal or None
Refuse = Callable[[str, dict[str, Any]], Refusal | None]


async def _answer(
    send: Any, status: int, message: str, extra: dict[str, str] | None = None, close: bool = True
) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class TenantShare:
    """ASGI middleware: the requests of one token (a tenant) served at once are at most
    ``seats``; its others wait here, on the event loop, holding no worker thread and taking
    no interpreter time, until one of its own ends. A tenant looping reads from many threads
    then competes with another tenant's submit through ``seats`` requests, not through all of
    them: every request the service serves takes the interpreter's lock (the GIL) several
    times, and each waits behind every thread that wants it (as Kubernetes' API Priority and
    Fairness gives each flow its seats). Requests without a token are not queued (the app
    answers them 401 at once), so a client without one cannot hold a tenant's seats, and a
    request's body deadline (:class:`BodyLimit`, inside this) starts once it is seated.

    ``refuse`` (:data:`Refuse`) answers what the tenant's limits refuse (an unknown token, a
    project over its request rate) here, before it is seated or parsed: a tenant looping past
    its rate then costs the service a header look-up per request rather than a trip through
    the application."""

    def __init__(self, app: Any, seats: int, refuse: Refuse | None = None) -> None:
        self.app, self.seats, self.refuse = app, seats, refuse
        self._queues: dict[bytes, tuple[asyncio.Semaphore, list[int]]] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        token = _bearer(scope) if scope["type"] == "http" else b""
        if not token:
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        refused = self.refuse(token.decode("latin-1"), state) if self.refuse is not None else None
        if refused is not None:  # a body left unread must not stay on a kept connection
            return await _answer(send, *refused, close=scope["method"] not in ("GET", "HEAD"))
        seat, users = self._queues.setdefault(token, (asyncio.Semaphore(self.seats), [0]))
        users[0] += 1
        try:
            async with seat:
                await self.app(scope, receive, send)
        finally:
            users[0] -= 1
            if not users[0]:  # nobody of this token left: forget it (tokens are unbounded)
                del self._queues[token]


def _bearer(scope: Scope) -> bytes:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value)
    return b""
