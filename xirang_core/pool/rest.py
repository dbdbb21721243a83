"""The REST face of :class:`~xirang_core.pool.service.PoolService` on the standard library's
``http.server`` (threaded). Requests and answers are JSON; errors are ``{"error": message}``
with a 4xx status that names what is wrong. Bodies over ``MAX_BODY`` bytes are refused (413).

    GET    /v1/status                     pool summary            any token
    GET    /v1/jobs[?state=queued]        jobs you may see        any token
    POST   /v1/jobs                       submit                  project token (or operator)
    GET    /v1/jobs/<id>                  one job
    DELETE /v1/jobs/<id>                  cancel
    POST   /v1/jobs/<id>/complete         {"ok": true, "usage": {...}}: the job's executor reports
                                          its end (usage: utilisation, run_ended_at)
    GET    /v1/jobs/<id>/charge           what the pool's metering charges the job so far
    GET    /v1/queue                      queued jobs in order, with positions
    GET    /v1/projects                   quotas and usage
    PUT    /v1/projects/<name>            create/edit quota (operator); returns a new token once
    GET    /v1/nodes, /v1/devices         hardware and who holds it
    POST   /v1/nodes/<name>/drain         {"reason": ...} (operator); undrain likewise
    GET    /v1/usage?since=&until=&bucket=    device-seconds per project, type and time bucket
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from xirang_core.pool.errors import PoolError
from xirang_core.pool.service import OPERATOR, PoolService

MAX_BODY = 64 * 1024


def serve(service: PoolService, host: str, port: int) -> ThreadingHTTPServer:
    """A server bound to ``host:port`` (port 0 = any free port); call serve_forever()."""

    class Handler(_Handler):
        pool = service

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


class _Handler(BaseHTTPRequestHandler):
    pool: PoolService
    server_version = "xirang-pool/1"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:  # keep tokens and noise out of logs
        pass

    def _dispatch(self, method: str) -> None:
        try:
            url = urlparse(self.path)
            body = self._body() if method in ("POST", "PUT") else {}
            who = self.pool.whoami(_bearer(self.headers.get("Authorization", "")))
            status, answer = 200, self._route(method, url.path, parse_qs(url.query), body, who)
            if method == "POST" and url.path == "/v1/jobs":
                status = 201
        except PoolError as exc:
            status, answer = exc.status, {"error": str(exc)}
        except Exception as exc:  # one request never takes the service down
            status, answer = 500, {"error": f"internal error: {type(exc).__name__}"}
        self._send(status, answer)

    def _route(self, method: str, path: str, query: dict, body: dict, who: str) -> Any:
        pool = self.pool
        for pattern, verb, handler in _ROUTES:
            match = re.fullmatch(pattern, path)
            if match and verb == method:
                return handler(pool, who, body, query, *match.groups())
        if any(re.fullmatch(p, path) for p, _, _ in _ROUTES):
            raise PoolError(f"{method} is not allowed on {path}", 405)
        raise PoolError(f"no such endpoint {path}; see docs/pool.md for the API", 404)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise PoolError(f"request body of {length} bytes is over the {MAX_BODY} limit", 413)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise PoolError("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise PoolError("request body must be a JSON object")
        return body

    def _send(self, status: int, answer: Any) -> None:
        data = json.dumps(answer, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _bearer(header: str) -> str:
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _job_id(text: str) -> int:
    return int(text)


def _float(query: dict, key: str, default: float) -> float:
    try:
        return float(query.get(key, [default])[0])
    except ValueError:
        raise PoolError(f"query parameter {key} must be a number") from None


def _usage(pool: PoolService, who: str, query: dict) -> Any:
    project = None if who == OPERATOR else who
    bucket = _float(query, "bucket", 3600.0)
    if bucket <= 0:
        raise PoolError("bucket must be a positive number of seconds")
    return pool.store.usage(
        _float(query, "since", 0.0), _float(query, "until", float("inf")), bucket, project
    )


def _ok(body: dict) -> bool:
    ok = body.get("ok", True)
    if not isinstance(ok, bool):
        raise PoolError("'ok' must be true or false")
    return ok


def _usage_report(body: dict) -> dict[str, Any]:
    report = body.get("usage") or {}
    if not isinstance(report, dict):
        raise PoolError('\'usage\' must be an object: {"utilisation": 0.8, "run_ended_at": ...}')
    return report


_ROUTES: list[tuple[str, str, Any]] = [
    (r"/v1/status", "GET", lambda p, w, b, q: p.status(w)),
    (r"/v1/jobs", "GET", lambda p, w, b, q: p.jobs(w, q.get("state", [""])[0])),
    (r"/v1/jobs", "POST", lambda p, w, b, q: p.submit(w, b)),
    (r"/v1/jobs/(\d+)", "GET", lambda p, w, b, q, i: p.job(w, _job_id(i))),
    (r"/v1/jobs/(\d+)", "DELETE", lambda p, w, b, q, i: p.cancel(w, _job_id(i))),
    (
        r"/v1/jobs/(\d+)/complete",
        "POST",
        lambda p, w, b, q, i: p.complete(w, _job_id(i), _ok(b), _usage_report(b)),
    ),
    (r"/v1/jobs/(\d+)/charge", "GET", lambda p, w, b, q, i: p.job_charge(w, _job_id(i))),
    (r"/v1/queue", "GET", lambda p, w, b, q: p.queue(w)),
    (r"/v1/projects", "GET", lambda p, w, b, q: p.quotas(w)),
    (r"/v1/projects/([\w-]+)", "PUT", lambda p, w, b, q, n: p.set_quota(w, n, b)),
    (r"/v1/nodes", "GET", lambda p, w, b, q: p.store.nodes()),
    (r"/v1/devices", "GET", lambda p, w, b, q: p.store.devices()),
    (
        r"/v1/nodes/([\w.-]+)/drain",
        "POST",
        lambda p, w, b, q, n: p.drain(w, n, str(b.get("reason", ""))),
    ),
    (r"/v1/nodes/([\w.-]+)/undrain", "POST", lambda p, w, b, q, n: p.undrain(w, n)),
    (r"/v1/usage", "GET", lambda p, w, b, q: _usage(p, w, q)),
]
