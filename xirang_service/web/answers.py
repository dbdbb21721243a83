"""JSON answers built once: the service's own dictionaries serialised by pydantic-core's
encoder (in Rust), with no response-model validation on the way out.

FastAPI validates a route's return value against its ``response_model`` and then encodes it
twice (to plain Python, then ``json.dumps``): at 2,500 jobs that tripled the cost of
``GET /v1/jobs`` over the standard library's server. A route returns :class:`JSONAnswer`
instead and keeps ``response_model`` for the OpenAPI document alone (FastAPI passes a returned
``Response`` through untouched); that the answers match the document is what the schemathesis
fuzz tests check (tests/pool/test_fuzz.py, tests/console/test_fuzz.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pydantic_core
from fastapi import Query
from starlette.exceptions import HTTPException
from starlette.responses import Response

from xirang_service.web.pages import (
    CONTINUE_HEADER,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    BadCursor,
    Key,
    Page,
    body,
    page,
)


class JSONAnswer(Response):
    """``content`` as JSON (UTF-8; a non-finite float is ``null``, so the body stays JSON)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _json(content)


class AddHeaders:
    """ASGI middleware: ``headers`` on every answer of ``app``, added to the response's start
    message. Starlette's ``@app.middleware("http")`` does the same through a task and memory
    streams per request, which cost the console's small answers more than the answers did."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *self.headers]
            await send(message)

        await self.app(scope, receive, send_with_headers)


#: ``?limit=``: rows per page of a list (:mod:`xirang_service.web.pages`)
Limit = Annotated[
    int, Query(ge=1, le=MAX_LIMIT, description=f"rows per page (default {DEFAULT_LIMIT})")
]
#: ``?continue=``: the cursor the previous page gave
Cursor = Annotated[
    str,
    Query(
        alias="continue",
        max_length=1000,
        description=f"the {CONTINUE_HEADER} header of the previous page",
    ),
]
#: what a paged list's route documents of its answer
PAGED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": f"one page; the next page's cursor in the {CONTINUE_HEADER} header",
        "headers": {CONTINUE_HEADER: {"schema": {"type": "string"}, "description": "next page"}},
    }
}


def paged(
    rows: list[dict[str, Any]],
    key: Key,
    kind: str,
    limit: int,
    cursor: str,
    finish: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> Response:
    """One page of ``rows`` (sorted by ``key``) as an answer: ``limit`` rows at most, and no
    more than :data:`~xirang_service.web.pages.MAX_PAGE_BYTES` of JSON, ``finish`` applied to
    the page's rows alone (a job's cost, priced for the jobs sent, not the whole list); the
    next page's cursor in the ``X-Xirang-Continue`` header; a cursor the list never gave is a
    400."""
    try:
        found = page(rows, key, limit, cursor, kind)
    except BadCursor as exc:
        raise HTTPException(400, str(exc)) from None
    if finish is not None:
        found = Page(finish(found.rows), found.next)
    content, following = body(found, key, kind, _json)
    headers = {CONTINUE_HEADER: following} if following else {}
    return Response(content, media_type=JSONAnswer.media_type, headers=headers)


def _json(content: Any) -> bytes:
    return pydantic_core.to_json(content, inf_nan_mode="null")
