"""Validated edges shared by the pool API and the console: text that every store can hold, the
strict base of request models, and the JSON error answers (``{"error": message}``, 4xx naming
the field; an unexpected exception is a logged 500 for that request alone).

JSON may carry a lone UTF-16 surrogate (``"\\ud800"``) or a NUL (``"\\u0000"``) that Python
decodes happily and a database refuses at the write (PostgreSQL takes no NUL, UTF-8 no
surrogate), so :data:`Text` refuses both at the edge, with a length limit.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import JsonDict
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException

from xirang_core.errors import XirangError

log = logging.getLogger("xirang.web")

#: characters no stored string may hold: NUL and the UTF-16 surrogates
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: the same as a JSON-schema pattern, so generated clients (and schemathesis) know the rule
TEXT_PATTERN = "^[^\\u0000\\ud800-\\udfff]*$"
MAX_TEXT = 200


def check_text(value: str) -> str:
    """``value`` if a database can store it; else a validation error saying why."""
    bad = _UNSTORABLE.search(value)
    if bad:
        what = "NUL" if bad.group() == "\x00" else "a lone UTF-16 surrogate"
        raise PydanticCustomError("text", f"must be valid Unicode text; it holds {what}")
    return value


#: the validator of every stored string (a type is ``Annotated[str, <its length and pattern>,
#: STORABLE]``, so mypy sees a ``str`` and pydantic checks it)
STORABLE = AfterValidator(check_text)
#: the storable rule in the JSON schema of a string that has no pattern of its own
_STORABLE_SCHEMA: JsonDict = {"pattern": TEXT_PATTERN}

#: a storable string of at most :data:`MAX_TEXT` characters
Text = Annotated[
    str, StringConstraints(max_length=MAX_TEXT), Field(json_schema_extra=_STORABLE_SCHEMA), STORABLE
]
#: a storable string of at most 4096 characters (a path, an argument)
LongText = Annotated[
    str, StringConstraints(max_length=4096), Field(json_schema_extra=_STORABLE_SCHEMA), STORABLE
]


def check_json(value: Any, depth: int = 0) -> Any:
    """A free-form JSON value (a payload) whose strings, keys included, are storable and whose
    numbers are finite, nested at most 32 deep."""
    if depth > 32:
        raise PydanticCustomError("json", "is nested too deeply (32 levels at most)")
    if isinstance(value, str):
        return check_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("json", "must be a finite number")
    if isinstance(value, dict):
        return {check_text(k): check_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [check_json(v, depth + 1) for v in value]
    return value


def via(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A pydantic before-validator from one of the project's checks (which raise XirangError
    with the message users already know), so the message stays the same."""

    def validate(value: Any) -> Any:
        try:
            check(value)
        except XirangError as exc:
            raise PydanticCustomError("value", str(exc)) from None
        return value

    return validate


class StrictModel(BaseModel):
    """A request body: strict types (no "8" for 8, no NaN), unknown fields refused by name."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ErrorOut(BaseModel):
    error: str


#: the error answers every route may give, for the OpenAPI document
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in {
        400: "bad request: the message names the field",
        401: "no token, or not a valid one",
        403: "not yours, or needs the operator token",
        404: "no such job, project, node or endpoint",
        405: "method not allowed on this path",
        408: "the request body did not arrive in time",
        411: "a body without a Content-Length",
        413: "request body over the limit",
        503: "too many connections, or the store refused a write (nothing changed)",
    }.items()
}


def install_errors(app: FastAPI, user_errors: tuple[type[Exception], ...]) -> None:
    """JSON error answers on ``app``: ``user_errors`` carry their ``status`` (or 400)."""

    async def user_error(_: Request, exc: Exception) -> JSONResponse:
        return _error(getattr(exc, "status", 400), str(exc), getattr(exc, "headers", None))

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)  # the class it is registered for
        return _error(400, validation_message(exc.errors()))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)  # the class it is registered for
        messages = {
            404: f"no such endpoint {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }
        detail = exc.detail if isinstance(exc.detail, str) else ""
        message = messages.get(exc.status_code, detail) if detail in _STOCK else detail
        return _error(exc.status_code, message, exc.headers)

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error answering %s %s", request.method, request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}")

    _document_400_not_422(app)
    for error in user_errors:
        app.add_exception_handler(error, user_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal)


_STOCK = {"Not Found", "Method Not Allowed"}


def _document_400_not_422(app: FastAPI) -> None:
    """FastAPI documents a 422 for every route with parameters; these apps answer a bad
    request with 400 (documented in :data:`ERRORS`), so the document says only that."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
            return schema  # FastAPI keeps it as app.openapi_schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


_NO_ERROR: Mapping[str, Any] = {"loc": (), "msg": "bad request"}


def validation_message(errors: Iterable[Mapping[str, Any]]) -> str:
    """One line naming the first bad field: ``payload.utilisation: must be ...``."""
    first = next(iter(errors), _NO_ERROR)
    kind = first.get("type", "")
    where = ".".join(str(p) for p in first["loc"] if p not in ("body", "query", "path"))
    if kind == "json_invalid":
        return "request body is not valid JSON"
    if kind in ("model_attributes_type", "dict_type", "model_type") and not where:
        return "request body must be a JSON object"
    if kind == "extra_forbidden":
        return f"unknown field '{where}'"
    if kind == "missing":
        return f"{where} is required"
    message = str(first["msg"])
    return f"{where}: {message}" if where and not message.startswith(where) else message
