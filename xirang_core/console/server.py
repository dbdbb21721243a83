"""The console's HTTP server (standard library, threaded) and its background sampler.

    GET  /             overview: capacity, water level, utilisation charts, quota use
    GET  /jobs         queue and running jobs (a project sees its own)
    GET  /nodes        node health with drain reasons (operator)
    GET  /cost         cost by team, project and device type, budgets, findings
    GET  /api/overview | /api/jobs | /api/nodes | /api/cost      the same as JSON
    GET  /metrics      Prometheus exposition
    GET|POST /login, GET /logout

Pages accept the session cookie set at log-in; the API and ``/metrics`` also accept
``Authorization: Bearer <token>`` with the pool's project or operator tokens.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from xirang_core.console import auth, pages, prometheus
from xirang_core.console.auth import OPERATOR, SESSION_COOKIE, AuthError, Sessions
from xirang_core.console.html import login_form
from xirang_core.console.source import ConsoleSource

MAX_BODY = 4096
HTML = "text/html; charset=utf-8"
JSON = "application/json"


def serve(
    source: ConsoleSource,
    host: str = "127.0.0.1",
    port: int = 0,
    session_ttl_s: float = auth.DEFAULT_TTL_S,
) -> ThreadingHTTPServer:
    """A console server bound to ``host:port`` (0 = any free port); call serve_forever()."""

    class Handler(_Handler):
        pass

    Handler.source = source
    Handler.sessions = Sessions(session_ttl_s)
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


class Sampler(threading.Thread):
    """Calls ``source.sample()`` every ``interval`` seconds until :meth:`stop` (the first
    sample is the caller's, taken before serving so the first page already has figures)."""

    def __init__(self, source: ConsoleSource, interval: float = 30.0) -> None:
        super().__init__(daemon=True, name="xirang-console-sampler")
        self.source, self.interval = source, interval
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.source.sample()

    def stop(self) -> None:
        self._stop.set()


class _Handler(BaseHTTPRequestHandler):
    source: ConsoleSource
    sessions: Sessions
    server_version = "xirang-console/1"

    def log_message(self, format: str, *args: Any) -> None:  # no tokens or noise in logs
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/login":
            return self._login_page(200)
        if url.path == "/logout":
            self.sessions.close(self._cookie())
            return self._redirect("/login", clear=True)
        route = _PAGES.get(url.path) or _API.get(url.path)
        if route is None:
            return self._send(404, JSON, json.dumps({"error": f"no page {url.path}"}))
        who = self._who(page=url.path in _PAGES)
        if who is None:
            return None
        try:
            content_type, body = route(self.source, who, _page_no(query))
        except AuthError as exc:
            return self._send(403, JSON, json.dumps({"error": str(exc)}))
        return self._send(200, content_type, body)

    def do_POST(self) -> None:
        if urlparse(self.path).path != "/login":
            return self._send(405, JSON, json.dumps({"error": "only /login takes POST"}))
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self._send(413, JSON, json.dumps({"error": "request too large"}))
        form = parse_qs(self.rfile.read(length).decode(errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        try:
            auth.check_same_origin("POST", self.headers)
            auth.check_csrf(self._cookie(auth.CSRF_COOKIE), (form.get(auth.CSRF_FIELD) or [""])[0])
        except AuthError as exc:
            return self._login_page(403, str(exc))
        try:
            who = self.source.whoami(token)
        except AuthError as exc:
            return self._login_page(401, str(exc))
        sid = self.sessions.open(who, token)
        self._redirect("/", cookie=sid)

    # --- helpers ----------------------------------------------------------------------------

    def _who(self, page: bool) -> str | None:
        """The viewer, or None after answering 401 (API) or redirecting to the login page."""
        snap = self.source.snapshot()
        who = self.sessions.who(self._cookie(), snap.state.projects, self.source.operator_token)
        if who:
            return who
        header = self.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        try:
            return self.source.whoami(token)
        except AuthError as exc:
            if page:
                self._redirect("/login")
            else:
                self._send(401, JSON, json.dumps({"error": str(exc)}))
            return None

    def _cookie(self, name: str = SESSION_COOKIE) -> str:
        jar = SimpleCookie(self.headers.get("Cookie", ""))
        return jar[name].value if name in jar else ""

    def _login_page(self, status: int, message: str = "") -> None:
        """The log-in form with a fresh CSRF token, in its cookie and in the form."""
        csrf = auth.new_csrf_token()
        cookie = auth.cookie(auth.CSRF_COOKIE, csrf)
        self._send(status, HTML, login_form(csrf, message), [cookie])

    def _redirect(self, where: str, cookie: str = "", clear: bool = False) -> None:
        self.send_response(303)
        self.send_header("Location", where)
        if cookie or clear:
            self.send_header("Set-Cookie", auth.cookie(SESSION_COOKIE, cookie, self.sessions.ttl_s))
            self.send_header("Set-Cookie", auth.cookie(auth.CSRF_COOKIE, ""))
        self._security_headers()
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(
        self, status: int, content_type: str, body: str, cookies: tuple[str, ...] | list = ()
    ) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for value in cookies:
            self.send_header("Set-Cookie", value)
        self._security_headers()
        self.end_headers()
        self.wfile.write(data)

    def _security_headers(self) -> None:
        for name, value in auth.SECURITY_HEADERS.items():
            self.send_header(name, value)


def _page_no(query: dict[str, list[str]]) -> int:
    text = (query.get("page") or ["1"])[0]
    return max(1, int(text)) if text.isdigit() else 1


def _api_overview(source: ConsoleSource, who: str) -> dict[str, Any]:
    snap = source.snapshot()
    return {
        "you": pages.display_name(who),
        "taken": snap.taken,
        "capacity": snap.capacity,
        "drained_nodes": sum(1 for n in snap.nodes if not n["healthy"]),
        "quotas": source.quotas_for(who),
        "queued": sum(1 for j in source.jobs_for(who) if j["state"] == "queued"),
    }


def _nodes_json(source: ConsoleSource, who: str) -> list[dict[str, Any]]:
    if who != OPERATOR:
        raise AuthError("node health needs the operator token")
    return source.snapshot().nodes


def _json(fn: Callable[[ConsoleSource, str], Any]) -> Callable[..., tuple[str, str]]:
    def route(source: ConsoleSource, who: str, _page: int) -> tuple[str, str]:
        return JSON, json.dumps(fn(source, who))

    return route


_PAGES: dict[str, Callable[..., tuple[str, str]]] = {
    "/": lambda s, w, p: (HTML, pages.overview(s, w)),
    "/jobs": lambda s, w, p: (HTML, pages.jobs(s, w, p)),
    "/nodes": lambda s, w, p: (HTML, pages.nodes(s, w, p)),
    "/cost": lambda s, w, p: (HTML, pages.cost(s, w)),
}
_API: dict[str, Callable[..., tuple[str, str]]] = {
    "/api/overview": _json(_api_overview),
    "/api/jobs": _json(ConsoleSource.jobs_for),
    "/api/nodes": _json(_nodes_json),
    "/api/cost": _json(ConsoleSource.cost_view),
    "/metrics": lambda s, w, p: (prometheus.CONTENT_TYPE, prometheus.exposition(s, w)),
}
