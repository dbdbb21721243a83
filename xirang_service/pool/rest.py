"""The REST face of :class:`~xirang_service.pool.service.PoolService`: a FastAPI application
served by uvicorn (xirang_service/web/server.py). Requests and answers are JSON, described by the
models in :mod:`xirang_service.pool.api_models` and served as OpenAPI at ``/openapi.json``;
errors are ``{"error": message}`` with a 4xx status that names what is wrong. Limits (body,
headers, connections, time) are :class:`~xirang_service.web.server.Limits`.

    GET    /v1/status                     pool summary            any token
    GET    /v1/jobs[?state=queued]        jobs you may see        any token
    POST   /v1/jobs                       submit                  project token (or operator);
                                          an Idempotency-Key header makes a retry safe
    GET    /v1/jobs/<id>                  one job
    DELETE /v1/jobs/<id>                  cancel
    POST   /v1/jobs/<id>/complete         {"ok": true, "usage": {...}}: the job's executor reports
                                          its end (usage: utilisation, run_ended_at)
    POST   /v1/jobs/<id>/straggler        a balanced run's straggler rank: reported, and with
                                          --drain-stragglers its node drained when that pays
    GET    /v1/jobs/<id>/charge           what the pool's metering charges the job so far
    GET    /v1/jobs/<id>/history          queued, placed, preempted (by whom, why), requeued,
                                          resumed, finished; tokens and cost
    GET    /v1/queue                      queued jobs in order, with positions
    GET    /v1/projects                   quotas and usage
    PUT    /v1/projects/<name>            create/edit quota (operator); returns a new token once
    GET    /v1/nodes, /v1/devices         hardware and who holds it
    POST   /v1/nodes/<name>/drain         {"reason": ...} (operator); undrain likewise
    GET    /v1/usage?since=&until=&bucket=    device-seconds per project, type and time bucket

Handlers are plain functions, so FastAPI runs them in its thread pool: the service's lock and
its store writes never block the event loop that reads other clients' requests. The token
check alone runs on the loop (a hash and a look-up in the published view, no lock or store):
it saves every request a hop through the pool, a tenant's limits (rate, seats) included.
Tenants then take turns at the application (:mod:`xirang_service.web.turns`): while another
tenant waits, one looping requests finishes the one it has in and starts no more.
Handlers answer the service's dictionaries as they are
(:class:`~xirang_service.web.answers.JSONAnswer`): the response models document the answers,
the fuzz test checks them, nothing validates them again per request.
"""

import asyncio
import json
from collections.abc import Callable, MutableMapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import Response

from xirang_service.pool import api_models as m
from xirang_service.pool.errors import LEADER_HEADER, PoolError, StoreUnavailable
from xirang_service.pool.replica import Replica
from xirang_service.pool.service import PoolService
from xirang_service.web.answers import PAGED, Cursor, JSONAnswer, Limit
from xirang_service.web.answers import paged as paged_answer
from xirang_service.web.fields import ERRORS, ErrorOut, install_errors
from xirang_service.web.limits import BodyLimit, Refusal, Refuse, TenantShare
from xirang_service.web.pages import DEFAULT_LIMIT, Key
from xirang_service.web.server import Limits, WebServer

LIMITS = Limits(max_body_bytes=64 * 1024)
MAX_BODY = LIMITS.max_body_bytes
#: the smallest and largest usage bucket: the usage sum steps through a window bucket by bucket
MIN_BUCKET_S, MAX_BUCKET_S = 60, 366 * 86400

JobId = Annotated[int, PathParam(ge=0, le=2**53)]
ProjectName = Annotated[str, PathParam(pattern=r"^[\w.-]+$", max_length=200)]
NodeName = Annotated[str, PathParam(pattern=r"^[\w.-]+$", max_length=200)]
#: a client's name for one submission: a retry with the same key answers the same job
IdempotencyKey = Annotated[
    str | None, Header(pattern=r"^[\x21-\x7e]+$", max_length=200, alias="Idempotency-Key")
]


def serve(service: PoolService, host: str, port: int, limits: Limits = LIMITS) -> WebServer:
    """A server bound to ``host:port`` (port 0 = any free port); call serve_forever()."""
    gate = TenantShare(Bound(app(), service), limits.seats_per_token, refusal(lambda: service))
    return WebServer(BodyLimit(gate, limits), host, port, limits)


def serve_replica(replica: Replica, host: str, port: int, limits: Limits = LIMITS) -> WebServer:
    """A server for one replica (:mod:`xirang_service.pool.replica`): the pool API while it
    leads, 503 naming the leader while it stands by."""
    refuse = refusal(lambda: replica.service)
    shared = TenantShare(Switch(replica), limits.seats_per_token, refuse)
    return WebServer(BodyLimit(shared, limits), host, port, limits)


#: where the tenant gate leaves the caller it resolved, in the request's state
CALLER = "pool_caller"
#: where the server leaves the service that answers the request, in the request's state
SERVICE = "pool_service"


def refusal(current: Callable[[], PoolService | None]) -> Refuse:
    """What the tenant gate (:class:`TenantShare`) refuses of a request, from its
    ``Authorization`` header: an unknown token (401) or a project over its request rate (429),
    counted here once per request; None lets it through (a standby's requests too: its 503
    names the leader), with the caller it resolved left in the request's state, so the token
    is checked once per request."""

    def refuse(header: str, state: dict[str, Any]) -> Refusal | None:
        pool = current()
        scheme, _, token = header.partition(" ")
        if pool is None or scheme.lower() != "bearer":
            return None  # the application answers it
        try:
            caller = pool.whoami(token.strip())
            pool.throttle(caller)
        except PoolError as exc:
            return exc.status, str(exc), exc.headers
        state[CALLER] = caller
        return None

    return refuse


class Bound:
    """ASGI: the pool API answering with one service."""

    def __init__(self, api: FastAPI, service: PoolService) -> None:
        self.api, self.service = api, service

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope.setdefault("state", {})[SERVICE] = self.service
        await self.api(scope, receive, send)


class Switch:
    """ASGI: the pool API answering with the replica's current service (the API is built
    once, with the server: a new leader serves at once, not after building it); while there
    is none, every request is a 503 with ``Retry-After: 1``, the leader's URL in the
    ``X-Xirang-Leader`` header and the answer's ``leader`` (when known), nothing changed."""

    def __init__(self, replica: Replica) -> None:
        self.replica, self.api = replica, app()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        service = self.replica.service
        if service is None:
            return await _standby(send, *self.replica.standby_answer())
        await Bound(self.api, service)(scope, receive, send)


async def _standby(send: Any, message: str, leader: str) -> None:
    body = json.dumps({"error": message, "leader": leader or None}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
    ]
    if leader:
        headers.append((LEADER_HEADER.lower().encode(), leader.encode()))
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def app() -> FastAPI:
    """The pool API; each request is answered by the service its server left in the
    request's state (:data:`SERVICE`: the term's, on a replica)."""
    api = FastAPI(
        title="xirang pool",
        version="1",
        description="The shared accelerator pool: jobs, quotas, nodes, usage (docs/pool.md).",
        docs_url=None,
        redoc_url=None,
    )
    install_errors(api, (PoolError,))
    api.include_router(_routes())
    return _warmed(api)


def _warmed(api: FastAPI) -> FastAPI:
    """``api`` once it has answered one request in-process (a 503: no service yet). FastAPI
    sets its routes up on the first request it matches (0.2-0.4 s on a busy machine): paid
    here, with the server, not by a new leader's first clients during a failover."""
    scope = {"type": "http", "method": "GET", "path": "/v1/status", "raw_path": b"/v1/status"}
    scope |= {"query_string": b"", "headers": [], "http_version": "1.1", "root_path": ""}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: MutableMapping[str, Any]) -> None:
        pass

    asyncio.run(api(scope, receive, send))
    return api


async def _pool(request: Request) -> PoolService:
    """The service answering this request; without one (the warm-up request of
    :func:`_warmed`), a 503 that changed nothing."""
    service: PoolService | None = getattr(request.state, SERVICE, None)
    if service is None:
        raise StoreUnavailable("no pool service answers here yet; nothing changed, try again")
    return service


Pool = Annotated[PoolService, Depends(_pool)]


def _routes() -> APIRouter:
    bearer = HTTPBearer(auto_error=False, description="a project's token or the operator's")

    async def who(
        request: Request,
        pool: Pool,
        auth: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> str:
        """The caller, as the gate resolved it (and counted its rate); resolved here only for
        a request the gate did not see through (401 without a valid token)."""
        caller = getattr(request.state, CALLER, None)
        if caller is not None:
            return str(caller)
        return pool.whoami(auth.credentials.strip() if auth else "")

    Who = Annotated[str, Depends(who)]
    router = APIRouter(prefix="/v1", responses={**ERRORS, **_RATED})

    @router.get("/status", response_model=m.StatusOut)
    def status(you: Who, pool: Pool) -> Any:
        return JSONAnswer(pool.status(you))

    @router.get("/jobs", response_model=list[m.JobOut], responses=PAGED)
    def jobs(
        you: Who,
        pool: Pool,
        limit: Limit = DEFAULT_LIMIT,
        after: Cursor = "",
        state: Annotated[m.States | None, Query()] = None,
    ) -> Any:
        return paged(pool.jobs(you, state or "", priced=False), "jobs", limit, after, pool.price)

    @router.post(
        "/jobs",
        status_code=201,
        response_model=m.JobOut,
        responses={
            402: {"model": ErrorOut, "description": "the project's budget refuses"},
            413: {"model": ErrorOut, "description": "over the body limit or max_payload_bytes"},
            429: {
                "model": ErrorOut,
                "description": "the project has max_jobs queued or running, or is over its rate",
            },
        },
    )
    def submit(you: Who, pool: Pool, body: m.SubmitIn, key: IdempotencyKey = None) -> Any:
        return JSONAnswer(pool.submit(you, body.model_dump(exclude_unset=True), key or ""), 201)

    @router.get("/jobs/{job_id}", response_model=m.JobOut)
    def job(you: Who, pool: Pool, job_id: JobId) -> Any:
        return JSONAnswer(pool.job(you, job_id))

    @router.delete("/jobs/{job_id}", response_model=m.JobOut, responses=_CONFLICT)
    def cancel(you: Who, pool: Pool, job_id: JobId) -> Any:
        return JSONAnswer(pool.cancel(you, job_id))

    @router.post("/jobs/{job_id}/complete", response_model=m.JobOut, responses=_CONFLICT)
    def complete(you: Who, pool: Pool, job_id: JobId, body: m.CompleteIn | None = None) -> Any:
        body = body or m.CompleteIn()
        usage = body.usage.model_dump(exclude_unset=True) if body.usage else {}
        return JSONAnswer(pool.complete(you, job_id, body.ok, usage))

    @router.post("/jobs/{job_id}/straggler", response_model=m.StragglerOut, responses=_CONFLICT)
    def straggler(you: Who, pool: Pool, job_id: JobId, body: m.StragglerIn) -> Any:
        return JSONAnswer(pool.straggler(you, job_id, body.model_dump()))

    @router.get("/jobs/{job_id}/charge", response_model=m.ChargeOut | None)
    def charge(you: Who, pool: Pool, job_id: JobId) -> Any:
        return JSONAnswer(pool.job_charge(you, job_id))

    @router.get("/jobs/{job_id}/history", response_model=m.HistoryOut)
    def history(you: Who, pool: Pool, job_id: JobId) -> Any:
        return JSONAnswer(pool.job_history(you, job_id))

    @router.get("/queue", response_model=list[m.QueuedOut], responses=PAGED)
    def queue(you: Who, pool: Pool, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        return paged(pool.queue(you), "queue", limit, after)

    @router.get("/projects", response_model=list[m.ProjectOut], responses=PAGED)
    def projects(you: Who, pool: Pool, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        return paged(pool.quotas(you), "projects", limit, after)

    @router.put("/projects/{name}", response_model=m.QuotaSetOut)
    def set_quota(you: Who, pool: Pool, name: ProjectName, body: m.QuotaIn | None = None) -> Any:
        changes = body.model_dump(exclude_unset=True) if body else {}
        return JSONAnswer(pool.set_quota(you, name, changes))

    @router.get("/nodes", response_model=list[m.NodeOut], responses=PAGED)
    def nodes(you: Who, pool: Pool, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        return paged(pool.store.nodes(), "nodes", limit, after)

    @router.get("/devices", response_model=list[m.DeviceOut], responses=PAGED)
    def devices(you: Who, pool: Pool, limit: Limit = DEFAULT_LIMIT, after: Cursor = "") -> Any:
        return paged(pool.devices(you), "devices", limit, after)

    @router.post("/nodes/{name}/drain", response_model=m.DrainOut)
    def drain(you: Who, pool: Pool, name: NodeName, body: m.DrainIn | None = None) -> Any:
        return JSONAnswer(pool.drain(you, name, body.reason if body else ""))

    @router.post("/nodes/{name}/undrain", response_model=m.UndrainOut)
    def undrain(you: Who, pool: Pool, name: NodeName) -> Any:
        return JSONAnswer(pool.undrain(you, name))

    @router.get("/usage", response_model=list[m.UsageOut], responses=PAGED)
    def usage(
        you: Who,
        pool: Pool,
        limit: Limit = DEFAULT_LIMIT,
        after: Cursor = "",
        since: Annotated[float, Query(ge=0, le=1e11)] = 0.0,
        until: Annotated[float | None, Query(ge=0, le=1e11)] = None,
        bucket: Annotated[int, Query(ge=MIN_BUCKET_S, le=MAX_BUCKET_S)] = 3600,
    ) -> Any:
        end = float("inf") if until is None else until
        return paged(pool.usage(you, since, end, float(bucket)), "usage", limit, after)

    return router


#: each list's sort key: a cursor resumes after the last key sent
_KEYS: dict[str, Key] = {
    "jobs": lambda row: row["id"],
    "queue": lambda row: row["position"],
    "projects": lambda row: row["project"],
    "nodes": lambda row: row["name"],
    "devices": lambda row: row["id"],
    "usage": lambda row: (row["bucket_start"], row["project"], row["device_type"]),
}


def paged(
    rows: list[dict[str, Any]],
    kind: str,
    limit: int,
    cursor: str,
    finish: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> Response:
    """One page of the list ``kind`` (:func:`xirang_service.web.answers.paged`)."""
    return paged_answer(rows, _KEYS[kind], kind, limit, cursor, finish)


_RATED: dict[int | str, dict[str, Any]] = {
    429: {"model": ErrorOut, "description": "the project is over its request rate (Retry-After)"}
}
_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "the job has already ended"}
}
