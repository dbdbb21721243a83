"""A small client of the pool's REST API, used by the CLI and ``scheduler=pool``.

The URL comes from ``XIRANG_POOL_URL`` (default ``http://127.0.0.1:8476``) and the token from
``XIRANG_POOL_TOKEN``; both can be passed explicitly. The URL may be a comma-separated list
(or a list): the replicas of one pool (docs/pool.md, High availability). Errors the service
answers with become :class:`PoolError` carrying its message, so the user sees the service's
one clear line; so does a connection lost before the answer came, naming the request.

A 503 means the request changed nothing (a standby, a store that is away, an election under
way): the client tries the leader the answer names (when it is one of its endpoints), else its
next endpoint, and after a round of them waits :data:`FIRST_PAUSE_S`, doubling round after
round up to the answer's ``Retry-After``, for up to ``retry_s`` in all (a round whose named
leader refused the connection waits too: no round follows another at once). An endpoint that
refuses the connection (a killed replica) is skipped for the next; when every endpoint of a
round refuses, no pool serves and the error comes at once. A submission carries an
``Idempotency-Key``, and is sent again with it when the answer was lost: the service answers
the job the first attempt made, so a retry never makes a second job; so are reads and cancels
(a repeated cancel changes nothing).
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from typing import Any

from xirang_service.pool.errors import LEADER_HEADER, OPERATOR_HELP, TOKEN_HELP, PoolError
from xirang_service.web.pages import CONTINUE_HEADER

DEFAULT_URL = "http://127.0.0.1:8476"
#: how many times a retry-safe request is sent when its answer is lost
SUBMIT_ATTEMPTS = 3
#: how long a request is retried while the pool answers 503 (a failover takes up to 10 s)
RETRY_S = 20.0
#: the pause after the first round of endpoints that answered 503, doubled after each round up
#: to the answer's Retry-After: a failover that ends sooner is not waited out for a second
FIRST_PAUSE_S = 0.1


class PoolClient:
    def __init__(
        self,
        url: str | Sequence[str] = "",
        token: str = "",
        timeout: float = 30.0,
        source: str = "",
        retry_s: float = RETRY_S,
    ) -> None:
        given = url or os.environ.get("XIRANG_POOL_URL") or DEFAULT_URL
        listed = given.split(",") if isinstance(given, str) else list(given)
        #: every replica's URL; ``url`` is the one in use (the last that answered)
        self.urls = [u.strip().rstrip("/") for u in listed if u.strip()] or [DEFAULT_URL]
        self.url = self.urls[0]
        self.token = token or os.environ.get("XIRANG_POOL_TOKEN", "")
        self.timeout, self.retry_s = timeout, retry_s
        #: where the token came from, named when the service refuses it
        self.source = source or ("--token" if token else "XIRANG_POOL_TOKEN")

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One request, retried as the module says; its JSON answer, or PoolError."""
        return self._call(method, path, body, headers)[0]

    def listing(self, path: str) -> list[Any]:
        """Every row of a list (``/v1/jobs?state=queued``), page after page: the service
        answers at most a page a request and names the next one in its ``X-Xirang-Continue``
        header (:mod:`xirang_service.web.pages`)."""
        rows: list[Any] = []
        cursor = ""
        while True:
            sep = "&" if "?" in path else "?"
            answer, headers = self._call(
                "GET", path + (f"{sep}continue={cursor}" if cursor else "")
            )
            rows += answer
            cursor = headers.get(CONTINUE_HEADER) or ""
            if not cursor:
                return rows

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[Any, Any]:
        """:meth:`call`, with the answer's headers."""
        if not self.token:  # every endpoint needs one: say where it comes from, not just 401
            raise PoolError(f"missing token: {TOKEN_HELP}", 401)
        safe = method in ("GET", "DELETE") or "Idempotency-Key" in (headers or {})
        deadline, lost, pause = time.monotonic() + self.retry_s, 0, FIRST_PAUSE_S
        untried, answered, wait = list(self.urls), False, 0.0
        while True:
            if self.url in untried:
                untried.remove(self.url)
            try:
                return self._once(method, path, body, headers)
            except _Unavailable as exc:
                answered, wait = True, max(wait, exc.retry_after)
                if exc.leader in self.urls and exc.leader != self.url:
                    self.url = exc.leader
                    continue
                error: PoolError = exc
            except _Refused as exc:
                error = exc
            except LostAnswer as exc:
                lost += 1
                if not safe or lost >= SUBMIT_ATTEMPTS:
                    raise
                error, answered = exc, True
            if untried:
                self.url = untried[0]
                continue
            sleep = min(pause, wait)  # a round ended: the next after a pause
            if not answered or time.monotonic() + sleep > deadline:
                raise error
            time.sleep(sleep)
            untried, answered, wait, pause = list(self.urls), False, 0.0, 2 * pause

    def _once(
        self, method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str] | None
    ) -> tuple[Any, Any]:
        """``method path`` at the endpoint in use, once."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.loads(answer.read() or b"null"), answer.headers
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            text = f"pool service: {message}{self._refused(exc.code)}"
            if exc.code == 503:
                raise _Unavailable(text, exc.headers) from None
            raise PoolError(text, exc.code) from None
        except urllib.error.URLError as exc:
            raise _Refused(
                f"cannot reach the pool service at {', '.join(self.urls)} ({exc.reason}); start "
                "it with `xirang pool serve` or set XIRANG_POOL_URL"
            ) from None
        except (http.client.HTTPException, OSError) as exc:  # RemoteDisconnected, a reset
            raise LostAnswer(
                f"lost the connection to the pool service at {self.url} during {method} {path} "
                f"({type(exc).__name__}: {exc or 'no answer'}); the request may or may not "
                "have taken effect"
            ) from None

    def _refused(self, status: int) -> str:
        """For a refused token (401) or one without the right (403): where the token sent came
        from, so the user knows which setting to change."""
        if status not in (401, 403):
            return ""
        said = f" (the token sent came from {self.source}"
        if status == 403:
            return f"{said}; an operator's command needs the operator's token: {OPERATOR_HELP})"
        if self.source.startswith("the file"):
            return (
                f"{said}, kept by the `xirang pool serve` last started at {self.url}; the "
                f"service there now has another operator token: {OPERATOR_HELP})"
            )
        return f"{said}: check or replace it there)"

    def submit(self, key: str = "", **job: Any) -> dict[str, Any]:
        """Queue a job under idempotency ``key`` (a fresh one if not given), sending it again
        while its answer is lost or the pool fails over: the service answers the one job it
        made."""
        return self.call("POST", "/v1/jobs", job, {"Idempotency-Key": key or uuid.uuid4().hex})

    def job(self, job_id: int) -> dict[str, Any]:
        return self.call("GET", f"/v1/jobs/{job_id}")

    def complete(self, job_id: int, ok: bool, **usage: float) -> dict[str, Any]:
        """Report the job's end, with what the executor measured (utilisation, run_ended_at)."""
        body: dict[str, Any] = {"ok": ok, **({"usage": usage} if usage else {})}
        return self.call("POST", f"/v1/jobs/{job_id}/complete", body)

    def straggler(self, job_id: int, report: dict[str, Any]) -> dict[str, Any]:
        """Pass on a run's straggler (``rank``, ``speed_ratio``, ``speeds``, ``micro_batches``,
        ``remaining_steps``, ``restart_s``); the pool answers what it did about it."""
        return self.call("POST", f"/v1/jobs/{job_id}/straggler", report)

    def charge(self, job_id: int) -> dict[str, Any] | None:
        """What the pool charges the job so far (None when the pool does not meter)."""
        return self.call("GET", f"/v1/jobs/{job_id}/charge")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.call("DELETE", f"/v1/jobs/{job_id}")


class LostAnswer(PoolError):
    """The connection broke before the service answered: the request may have taken effect."""


class _Unavailable(PoolError):
    """A 503: nothing changed; ``retry_after`` seconds and the ``leader`` a standby named."""

    def __init__(self, message: str, headers: Any) -> None:
        super().__init__(message, 503)
        try:
            self.retry_after = max(1.0, float(headers.get("Retry-After") or 1))
        except ValueError:
            self.retry_after = 1.0
        self.leader = (headers.get(LEADER_HEADER) or "").rstrip("/")


class _Refused(PoolError):
    """No connection to an endpoint: the request was never sent."""
