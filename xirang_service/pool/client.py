"""A small client of the pool's REST API, used by the CLI and ``scheduler=pool``.

The URL comes from ``XIRANG_POOL_URL`` (default ``http://127.0.0.1:8476``) and the token from
``XIRANG_POOL_TOKEN``; both can be passed explicitly. Errors the service answers with become
:class:`PoolError` carrying its message, so the user sees the service's one clear line; so
does a connection lost before the answer came, naming the request. A submission carries an
``Idempotency-Key``, and is sent again with it when the answer was lost: the service answers
the job the first attempt made, so a retry never makes a second job.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
import uuid
from typing import Any

from xirang_service.pool.errors import OPERATOR_HELP, TOKEN_HELP, PoolError

DEFAULT_URL = "http://127.0.0.1:8476"
#: how many times a submission is sent when its answer is lost
SUBMIT_ATTEMPTS = 3


class PoolClient:
    def __init__(
        self, url: str = "", token: str = "", timeout: float = 30.0, source: str = ""
    ) -> None:
        self.url = (url or os.environ.get("XIRANG_POOL_URL") or DEFAULT_URL).rstrip("/")
        self.token = token or os.environ.get("XIRANG_POOL_TOKEN", "")
        self.timeout = timeout
        #: where the token came from, named when the service refuses it
        self.source = source or ("--token" if token else "XIRANG_POOL_TOKEN")

    def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        if not self.token:  # every endpoint needs one: say where it comes from, not just 401
            raise PoolError(f"missing token: {TOKEN_HELP}", 401)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise PoolError(f"pool service: {message}{self._refused(exc.code)}", exc.code) from None
        except urllib.error.URLError as exc:
            raise PoolError(
                f"cannot reach the pool service at {self.url} ({exc.reason}); start it with "
                "`xirang pool serve` or set XIRANG_POOL_URL"
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
        while its answer is lost: the service answers the one job it made."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        for _ in range(SUBMIT_ATTEMPTS - 1):
            try:
                return self.call("POST", "/v1/jobs", job, headers)
            except LostAnswer:
                continue
        return self.call("POST", "/v1/jobs", job, headers)

    def job(self, job_id: int) -> dict[str, Any]:
        return self.call("GET", f"/v1/jobs/{job_id}")

    def complete(self, job_id: int, ok: bool, **usage: float) -> dict[str, Any]:
        """Report the job's end, with what the executor measured (utilisation, run_ended_at)."""
        body: dict[str, Any] = {"ok": ok, **({"usage": usage} if usage else {})}
        return self.call("POST", f"/v1/jobs/{job_id}/complete", body)

    def charge(self, job_id: int) -> dict[str, Any] | None:
        """What the pool charges the job so far (None when the pool does not meter)."""
        return self.call("GET", f"/v1/jobs/{job_id}/charge")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self.call("DELETE", f"/v1/jobs/{job_id}")


class LostAnswer(PoolError):
    """The connection broke before the service answered: the request may have taken effect."""
