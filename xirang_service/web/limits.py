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
from xirang_service.web.turns import Turns

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
    """ASGI middleware: tenants (tokens) take turns at the application
    (:class:`~xirang_service.web.turns.Turns`): while another tenant waits, the one inside
    finishes the requests it has in (at most ``seats``) and starts no more, so a tenant looping
    reads from many threads delays another's submit by one of its requests, never by its
    whole loop. A request waits its turn on the event loop, holding no worker thread and
    taking no interpreter time. Requests without a token are not queued (the app answers them
    401 at once), so a client without one cannot hold a tenant's turn.

    An answer's bytes are charged to its tenant's turns (:meth:`Turns.charge`).

    A request's body is read before it is seated (within :class:`BodyLimit`'s deadlines, which
    wrap this) and its seat is given back once its answer starts, so a client sending its body
    or reading its answer slowly holds nobody's turn.

    ``refuse`` (:data:`Refuse`) answers what the tenant's limits refuse (an unknown token, a
    project over its request rate) here, before it is seated or its body read: a tenant looping
    past its rate then costs the service a header look-up per request rather than a trip
    through the application."""

    def __init__(self, app: Any, seats: int, refuse: Refuse | None = None) -> None:
        self.app, self.refuse = app, refuse
        self.turns = Turns(seats)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        token = _bearer(scope) if scope["type"] == "http" else b""
        if not token:
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})
        refused = self.refuse(token.decode("latin-1"), state) if self.refuse is not None else None
        if refused is not None:  # a body left unread must not stay on a kept connection
            return await _answer(send, *refused, close=scope["method"] not in ("GET", "HEAD"))
        try:
            body = await _whole_body(receive)
        except BodyTimeout as exc:
            return await _answer(send, exc.status_code, exc.detail)
        if body[-1]["type"] == "http.disconnect":
            return  # the client went away while sending: nobody to answer, no turn to take
        await self.turns.enter(token)
        seat = _Seat(self.turns, token)
        sent = 0

        async def answer(message: dict[str, Any]) -> None:
            nonlocal sent
            if message["type"] == "http.response.start":
                seat.give_back()
            sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, _replay(body, receive), answer)
        finally:
            seat.give_back()
            self.turns.charge(token, sent)  # a costly answer costs its tenant turns


class _Seat:
    """One request's seat at the turns, given back once: when its answer starts, or when the
    application ends without one."""

    def __init__(self, turns: Turns, tenant: bytes) -> None:
        self.turns, self.tenant, self.held = turns, tenant, True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.turns.leave(self.tenant)


async def _whole_body(receive: Any) -> list[dict[str, Any]]:
    """The request's body messages, all of them (a disconnect ends them early)."""
    messages = [await receive()]
    while messages[-1]["type"] == "http.request" and messages[-1].get("more_body", False):
        messages.append(await receive())
    return messages


def _replay(messages: list[dict[str, Any]], receive: Any) -> Any:
    """``receive`` for the application: the body read already, then what the server sends."""
    waiting = list(messages)

    async def replayed() -> dict[str, Any]:
        return waiting.pop(0) if waiting else await receive()

    return replayed


def _bearer(scope: Scope) -> bytes:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value)
    return b""
