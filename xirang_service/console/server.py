"""The console's web server (a FastAPI app on uvicorn, xirang_service/web/server.py) and its
background sampler.

    GET  /             overview: capacity, water level, utilisation charts, quota use
    GET  /jobs         queue and running jobs (a project sees its own)
    GET  /jobs/<id>    one job's history: queued, placed, preempted (by whom, why), resumed,
                       finished; tokens and cost (a project sees its own jobs)
    GET  /nodes        node health with drain reasons (operator)
    GET  /cost         cost by team, project and device type, budgets, findings
    GET  /api/overview | /api/jobs | /api/nodes | /api/cost      the same as JSON (the lists
                       a page at a time: ?limit=, and ?continue= the X-Xirang-Continue header)
    GET  /metrics      Prometheus exposition
    GET|POST /login, POST /logout (the session's CSRF token, from the pages' button)
    GET  /openapi.json the API's OpenAPI document

Pages accept the session cookie set at log-in; the API and ``/metrics`` also accept
``Authorization: Bearer <token>`` with the pool's project or operator tokens. The login form's
body is at most 4 KiB; the other limits are the pool's (:class:`~xirang_service.web.server.Limits`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi import Path as FastPath
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from xirang_service.console import auth, pages, prometheus
from xirang_service.console.api_models import CostOut, OverviewOut, Row
from xirang_service.console.auth import OPERATOR, SESSION_COOKIE, AuthError, Session, Sessions
from xirang_service.console.html import login_form
from xirang_service.console.source import ConsoleSource
from xirang_service.web.answers import PAGED, AddHeaders, Cursor, JSONAnswer, Limit, paged
from xirang_service.web.fields import ERRORS, install_errors
from xirang_service.web.limits import BodyLimit
from xirang_service.web.pages import DEFAULT_LIMIT
from xirang_service.web.server import Limits, WebServer

LIMITS = Limits(max_body_bytes=4096)
MAX_BODY = LIMITS.max_body_bytes
HTML = "text/html; charset=utf-8"
NO_STORE = {"Cache-Control": "no-store"}
Page = Annotated[int, Query(ge=1, le=1_000_000)]


def serve(
    source: ConsoleSource,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: Limits = LIMITS,
    session_ttl_s: float = auth.DEFAULT_TTL_S,
) -> WebServer:
    """A console server bound to ``host:port`` (0 = any free port); call serve_forever().
    A browser session lasts ``session_ttl_s`` (or until its token is rotated)."""
    sessions = Sessions(session_ttl_s)
    return WebServer(BodyLimit(app(source, sessions), limits), host, port, limits)


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


def app(source: ConsoleSource, sessions: Sessions) -> FastAPI:
    """The console's pages and API over ``source``, with browser ``sessions``."""
    console = FastAPI(title="xirang console", version="1", docs_url=None, redoc_url=None)
    install_errors(console, ())
    viewer = _Viewer(source, sessions)

    console.add_middleware(AddHeaders, headers=auth.SECURITY_HEADERS)  # no framing, no sniffing

    @console.exception_handler(AuthError)
    async def refused(request: Request, exc: AuthError) -> Response:
        return _json({"error": str(exc)}, 403)

    @console.exception_handler(_LoggedOut)
    async def logged_out(request: Request, exc: _LoggedOut) -> Response:
        if exc.page:
            return _redirect("/login")
        return _json({"error": exc.message}, 401)

    @console.exception_handler(404)
    async def no_page(request: Request, exc: Exception) -> Response:
        return _json({"error": f"no page {request.url.path}"}, 404)

    @console.exception_handler(405)
    async def no_method(request: Request, exc: Exception) -> Response:
        return _json({"error": f"{request.method} is not allowed on {request.url.path}"}, 405)

    console.include_router(_pages(source, viewer, sessions))
    console.include_router(_api(source, viewer))
    return console


class _LoggedOut(Exception):
    """No session and no valid token: a page goes to the login form, the API answers 401."""

    def __init__(self, message: str, page: bool) -> None:
        super().__init__(message)
        self.message, self.page = message, page


class _Viewer:
    """Who is asking: the session cookie's viewer, else the bearer token's."""

    def __init__(self, source: ConsoleSource, sessions: Sessions) -> None:
        self.source, self.sessions = source, sessions

    def __call__(self, request: Request, page: bool) -> str:
        session = self.session(request)
        if session is not None:
            return session.who
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        try:
            return self.source.whoami(token)
        except AuthError as exc:
            raise _LoggedOut(str(exc), page) from None

    def session(self, request: Request) -> Session | None:
        """The live session the request's cookie names, if any."""
        state = self.source.snapshot().state
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return self.sessions.get(cookie, state.projects, self.source.operator_token)


def _pages(source: ConsoleSource, viewer: _Viewer, sessions: Sessions) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    def html(render: Callable[[str, int, str], str]) -> Callable[..., Response]:
        def show(request: Request, page: Page = 1) -> Response:
            session = viewer.session(request)
            who = session.who if session else viewer(request, page=True)
            return _html(render(who, page, session.csrf if session else ""))

        return show

    router.get("/")(html(lambda w, p, c: pages.overview(source, w, c)))
    router.get("/jobs")(html(lambda w, p, c: pages.jobs(source, w, p, c)))
    router.get("/nodes")(html(lambda w, p, c: pages.nodes(source, w, p, c)))

    @router.get("/jobs/{job_id}")
    def job(request: Request, job_id: Annotated[int, FastPath(ge=0, le=2**53)]) -> Response:
        def render(who: str, _: int, csrf: str) -> str:
            history = source.job_history(who, job_id)
            if history is None:  # unknown, or another project's: the same answer
                raise HTTPException(404)
            return pages.job(history, who, csrf)

        return html(render)(request)

    router.get("/cost")(html(lambda w, p, c: pages.cost(source, w, c)))

    @router.get("/login")
    def login_page() -> Response:
        return _login_page(200)

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await _form(request)
        token = form.get("token", "").strip()
        try:
            auth.check_same_origin("POST", request.headers)
            sent = form.get(auth.CSRF_FIELD, "")
            auth.check_csrf(request.cookies.get(auth.CSRF_COOKIE, ""), sent)
        except AuthError as exc:
            return _login_page(403, str(exc))
        try:
            who = source.whoami(token)
        except AuthError as exc:
            return _login_page(401, str(exc))
        return _redirect("/", cookie=sessions.open(who, token), ttl_s=sessions.ttl_s)

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        """End the session, if the post carries its CSRF token from the console's origin
        (another site could otherwise log the viewer out); no live session: nothing to end."""
        form = await _form(request)
        session = viewer.session(request)
        if session is not None:
            try:
                auth.check_same_origin("POST", request.headers)
                auth.check_csrf(session.csrf, form.get(auth.CSRF_FIELD, ""))
            except AuthError as exc:
                return _json({"error": str(exc)}, 403)
            sessions.close(request.cookies.get(SESSION_COOKIE, ""))
        return _redirect("/login", clear=True)

    return router


def _api(source: ConsoleSource, viewer: _Viewer) -> APIRouter:
    router = APIRouter(responses={k: ERRORS[k] for k in (400, 401, 403, 404)})

    @router.get("/api/overview", response_model=OverviewOut)
    def overview(request: Request) -> Any:
        who = viewer(request, page=False)
        snap = source.snapshot()
        overview = {
            "you": pages.display_name(who),
            "taken": snap.taken,
            "capacity": snap.capacity,
            "drained_nodes": sum(1 for n in snap.nodes if not n["healthy"]),
            "quotas": source.quotas_for(who),
            "queued": sum(1 for j in source.jobs_for(who) if j["state"] == "queued"),
        }
        return JSONAnswer(overview)

    @router.get("/api/jobs", response_model=list[Row], responses=PAGED)
    def jobs(request: Request, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        rows = source.jobs_for(viewer(request, page=False))
        return paged(rows, _job_order, "jobs", limit, after)

    @router.get("/api/nodes", response_model=list[Row], responses=PAGED)
    def nodes(request: Request, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        if viewer(request, page=False) != OPERATOR:
            raise AuthError("node health needs the operator token")
        return paged(source.snapshot().nodes, _node_order, "nodes", limit, after)

    @router.get("/api/cost", response_model=CostOut)
    def cost(request: Request) -> Any:
        return JSONAnswer(source.cost_view(viewer(request, page=False)))

    @router.get("/metrics", response_class=Response)
    def metrics(request: Request) -> Response:
        text = prometheus.exposition(source, viewer(request, page=False))
        return Response(text, media_type=prometheus.CONTENT_TYPE, headers=NO_STORE)

    return router


async def _form(request: Request) -> dict[str, str]:
    """A posted form's fields (the first value of each; the body is at most 4 KiB)."""
    form = parse_qs((await request.body()).decode(errors="replace"))
    return {name: values[0] for name, values in form.items()}


def _html(body: str, status: int = 200) -> Response:
    return HTMLResponse(body, status, headers=NO_STORE, media_type=HTML)


def _json(answer: Any, status: int) -> Response:
    return JSONResponse(answer, status, headers=NO_STORE)


def _login_page(status: int, message: str = "") -> Response:
    """The log-in form with a fresh CSRF token, in its cookie and in the form."""
    csrf = auth.new_csrf_token()
    answer = _html(login_form(csrf, message), status)
    answer.headers.append("Set-Cookie", auth.cookie(auth.CSRF_COOKIE, csrf))
    return answer


def _redirect(
    where: str, cookie: str = "", clear: bool = False, ttl_s: float | None = None
) -> Response:
    """A 303 to ``where``; with ``cookie`` it opens that session, with ``clear`` it ends it
    (the log-in form's CSRF cookie goes either way)."""
    answer = RedirectResponse(where, 303, headers=NO_STORE)
    if cookie or clear:
        answer.headers.append("Set-Cookie", auth.cookie(SESSION_COOKIE, cookie, ttl_s))
        answer.headers.append("Set-Cookie", auth.cookie(auth.CSRF_COOKIE, ""))
    return answer


def _job_order(row: dict[str, Any]) -> tuple[bool, int, int]:
    """The console's job order as a page cursor's key: queued by position, then running."""
    return (row["position"] is None, row["position"] or 0, int(row["id"]))


def _node_order(row: dict[str, Any]) -> tuple[bool, str]:
    """The console's node order as a page cursor's key: drained first, then by name."""
    return (bool(row["healthy"]), str(row["name"]))
