"""The pool service: one engine, its store (SQLite or PostgreSQL), project tokens and the executors.

Every change runs under one lock: validate, change the engine, run a scheduling pass, write
the changed jobs and the events in one transaction, publish the new :class:`View`, then queue
what the executor must do (start, stop, drain). The executor's calls (an sbatch, a scancel, a
poll of Slurm: each may wait on a stalled controller) are made outside that lock, in order, by
the request's own thread after it lets go of the lock, or, for an executor whose calls go to a
remote controller (``remote = True``), by the service's actor thread, so no tenant waits on
another's sbatch. A running job whose start its executor has not confirmed shows
``submitting``; one its executor could not learn of, ``unknown``. Reads answer from the
published view, without the lock: a tenant hammering reads neither waits for nor delays
another's submit, and nobody sees a change the store refused. A restart rebuilds the engine
from the store, so no queued or running job is lost. Tokens are stored only as SHA-256
hashes; a project token sees and cancels only its own project's jobs, the operator token sees
and does everything.

Budgets (xirang_service.cost.budgets) act here: a submission is admitted, demoted or refused (402)
by the governor, and each tick meters the pool's usage and ends the jobs a budget stops.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, runtime_checkable

from xirang_service.cost.errors import BudgetExceeded
from xirang_service.cost.governor import PoolBudgets
from xirang_service.cost.usage import UsageError, check_report
from xirang_service.pool import clusterfile
from xirang_service.pool.accounts import check_account, job_umask
from xirang_service.pool.cards import DEFAULT_CLASS, Throughputs
from xirang_service.pool.cluster import Inventory
from xirang_service.pool.engine import Event, PoolEngine
from xirang_service.pool.errors import TOKEN_HELP, PoolError, StoreUnavailable
from xirang_service.pool.history import job_history, priced, waiting_event
from xirang_service.pool.jobs import (
    MIX,
    Job,
    JobState,
    check_cards,
    check_payload,
    parse_priority,
    priority_name,
)
from xirang_service.pool.placement import span
from xirang_service.pool.policy import load_policy
from xirang_service.pool.quota import (
    DEFAULT_MAX_JOBS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_MAX_PRIORITY,
    DEFAULT_UMASK,
    Project,
)
from xirang_service.pool.rates import RateBuckets
from xirang_service.pool.rows import Rows
from xirang_service.pool.store import PoolStore, check_bucket
from xirang_service.pool.stragglers import Prediction, StragglerReport, predict
from xirang_service.pool.tokens import new_token

log = logging.getLogger("xirang.pool")
OPERATOR = "*operator*"
MAX_NAME = 200


class Executor(Protocol):
    """Runs what the pool placed: told when a job starts and when it must stop, never under
    the service's lock. One with ``remote = True`` (its calls may wait on a remote controller)
    is called from the service's actor thread; it may offer ``bind(store_id)`` (the store's
    own id, to keep its jobs apart from another store's) and ``fates()`` (its running jobs it
    cannot vouch for now: ``submitting`` or ``unknown``, shown as their state)."""

    def start(self, job: Job, nodes: list[str], leaves: int = 1, account: str = "") -> Any:
        """Run ``job`` on ``nodes``; an executor with ``accounts = True`` runs it as
        ``account`` (the project's ``run_as``), which the service always gives it."""

    def stop(self, job: Job, reason: str) -> None: ...

    def poll(self) -> list[tuple[int, bool]]:
        """Jobs that ended since the last poll, with whether they succeeded (an executor may
        also offer ``usage(job_id)``: what it measured of an ended job, for cost metering).

        ``start`` may return a handle (a Slurm job id): the service stores it at once, and an
        executor that offers ``adopt(handles)`` is given, at a restart, the stored handle of
        every running job (None where none was stored) to poll again. One that offers
        ``intent(job)`` (the name it will submit the job under) has that stored as the
        handle before ``start``, so a restart finds a job whose handle was never stored."""


@runtime_checkable
class DrainingExecutor(Protocol):
    """An executor that takes a drained node out of its own cluster too (Slurm: ``scontrol
    update State=DRAIN``); the service tells it when an operator or a straggler drains one."""

    def drain(self, node: str, reason: str) -> None: ...


@runtime_checkable
class LimitingExecutor(Protocol):
    """An executor whose cluster holds each project's jobs to its quota itself, however they
    reach it (Slurm: the project's association ``GrpTRES``, through ``sacctmgr``). The service
    tells it every project's ``cards`` (guaranteed plus borrowable; None: unlimited), its
    ``account`` (``run_as``) and the pool's device types at start and at each change of them;
    it never raises for a limit it could not set (it logs it and tries again)."""

    def limit(
        self, project: str, account: str, cards: int | None, types: Sequence[str]
    ) -> None: ...


class RecordingExecutor:
    """The default for ``xirang pool serve``: the submitter runs its own job (the local
    executor), so the service only records what it was told."""

    name = "local"

    def __init__(self) -> None:
        self.started: list[int] = []
        self.stopped: list[int] = []

    def start(self, job: Job, nodes: list[str], leaves: int = 1, account: str = "") -> None:
        self.started.append(job.id)

    def stop(self, job: Job, reason: str) -> None:
        self.stopped.append(job.id)

    def poll(self) -> list[tuple[int, bool]]:
        return []


@dataclass(frozen=True)
class Action:
    """One executor call a stored change asks for (``start``, ``stop``, ``drain`` or
    ``limit``), made outside the service's lock; ``job`` is a copy, as the change left it."""

    kind: str
    job: Job | None = None
    nodes: tuple[str, ...] = ()
    leaves: int = 1
    account: str = ""
    umask: int = 0o077
    reason: str = ""
    node: str = ""
    project: str = ""
    cards: int | None = None
    types: tuple[str, ...] = ()


P = ParamSpec("P")
R = TypeVar("R")


def _then_act(
    method: Callable[Concatenate[PoolService, P], R],
) -> Callable[Concatenate[PoolService, P], R]:
    """A request that changes the pool: once it let go of the lock, the executor calls its
    change asked for are made (:meth:`PoolService._kick`), whatever it answered."""

    @functools.wraps(method)
    def changing(self: PoolService, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        finally:
            self._kick()

    return changing


@dataclass(frozen=True)
class View:
    """What the read routes answer, as of the last stored change. Published whole (one
    attribute assignment) and never changed after (but for the cache ``picked``), so readers
    need no lock."""

    #: every job as the API shows it, by id
    jobs: Rows = field(default_factory=Rows)
    #: queued job ids in scheduling order
    queue: tuple[int, ...] = ()
    #: each project's quota row, by name
    quotas: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: each project's token hash (projects without a token left out)
    tokens: dict[str, str] = field(default_factory=dict)
    #: the pool summary of ``GET /v1/status``, less what depends on who asks
    summary: dict[str, Any] = field(default_factory=dict)
    #: why each queued job did not start at the last pass (those it looked at)
    waiting: Mapping[int, str] = field(default_factory=dict)
    #: the stored rows the last load could not use (the operator's status shows them)
    set_aside: list[dict[str, Any]] = field(default_factory=list)
    #: ``jobs(who, state)``'s rows as of this view, filled by the reads that ask (a cache:
    #: the only part of a view written after it is published, whole entries at a time)
    picked: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)


class PoolService:
    def __init__(
        self,
        store: PoolStore,
        cluster_file: str | Path | None = None,
        policy: str = "priority",
        operator_token: str = "",
        executor: Executor | None = None,
        clock: Callable[[], float] = time.time,
        budgets: PoolBudgets | None = None,
        drain_stragglers: bool = False,
    ) -> None:
        self.store = store
        #: drain a straggler's node when that pays (``xirang pool serve --drain-stragglers``)
        self.drain_stragglers = drain_stragglers
        self.clock = clock
        self.budgets = budgets or PoolBudgets.open()
        self.lock = threading.RLock()
        self.executor = executor or RecordingExecutor()
        self.operator_hash = _hash(operator_token) if operator_token else ""
        self.policy = load_policy(policy)
        self.throughputs = self._hardware(cluster_file)
        self._stops: list[tuple[Job, str]] = []  # told to the executor once the change is stored
        self._limits: list[Project] = []  # projects whose cluster limits changed, likewise
        self._projects: dict[str, Project] = {}  # edited, stored with the next change
        self._jobs: dict[int, Job] = {}  # changed without an event, stored likewise
        self._ended: list[tuple[int, bool]] = []  # polled ends not yet stored
        self._keys: list[tuple[str, str, int, str]] = []  # submissions' idempotency keys, likewise
        self._sizes: dict[int, int] = {}  # live jobs' payload bytes, for the project caps
        self._stale = False  # memory may differ from the store: reload before the next change
        self._outbox: deque[Action] = deque()  # executor calls stored changes asked for
        self._starting: set[int] = set()  # jobs whose start is queued or being made
        self._fates: dict[int, str] = {}  # the executor's word on running jobs it is unsure of
        self._acting = threading.Lock()  # one thread at a time calls the executor
        self._rounds = threading.Condition()  # the actor's work: asked and done
        self._asked = self._done = 0
        self._poll_asked = self._closing = False
        self.rates = RateBuckets()
        self.view = View()
        bind = getattr(self.executor, "bind", None)
        if bind is not None:  # e.g. Slurm: the store's id in its job names and output files
            bind(self._store_id())
        self.restored = self._load()
        self._adopt()
        self.budgets.check_types(self.engine.cluster.types)
        if getattr(self.executor, "remote", False):
            threading.Thread(target=self._actor, name="pool-executor", daemon=True).start()
        with self.lock, self._change(clock()):
            # a first pass: what fits starts, and a restart's repairs are stored; the cluster
            # is told every project's limits first (they may have changed while it was down)
            self._limits = list(self.engine.quotas.projects.values())
        self._kick()

    def _store_id(self) -> str:
        """This store's own random id (made once, kept in its ``meta`` table)."""
        found = self.store.meta("store_id")
        if found is None:
            found = secrets.token_hex(4)
            self.store.set_meta("store_id", found)
        return found

    def close(self) -> None:
        """Stop the actor thread (its call in flight ends first) and close the store."""
        with self._rounds:
            self._closing = True
            self._rounds.notify_all()
        with self._acting:
            self.store.close()

    def _load(self) -> int:
        """Build the engine from the store: at start, and after a write the store refused (so
        memory is what the store holds, untouched by the failed request); returns how many
        queued or running jobs it restored."""
        engine = PoolEngine(
            Inventory(self.store.cluster_nodes()),
            self.throughputs,
            self.policy,
            preferences=self.budgets.preferences,
        )
        restored = self.store.load_into(engine, self.clock())
        self.engine, self._stale = engine, False
        self._publish(engine.jobs.values(), everything=True)
        return restored

    def _publish(self, changed: Any, everything: bool = False) -> None:
        """A new :class:`View` from the engine, which the store now matches: the ``changed``
        jobs described again, the others' rows kept (or, ``everything``, all rebuilt)."""
        engine, cluster = self.engine, self.engine.cluster
        aside = self.store.set_aside() if everything else self.view.set_aside
        rows = {}
        for job in changed:
            rows[job.id] = describe(job, self._speeds(job))
            rows[job.id]["state"] = self._state(job)
            if job.state.finished:  # no longer counts towards its project's payload cap
                self._sizes.pop(job.id, None)
        jobs = Rows(rows) if everything else self.view.jobs.updated(rows)
        projects = engine.quotas.projects.values()
        self.view = View(
            jobs=jobs,
            queue=tuple(job_id for _, job_id in engine.queue),
            waiting=engine.waiting,
            quotas={p.name: self._quota_row(p) for p in projects},
            tokens={p.name: p.token_hash for p in projects if p.token_hash},
            summary={
                "policy": engine.policy.name,
                "executor": getattr(self.executor, "name", "local"),
                "types": {
                    t: {"capacity": cluster.capacity(t), "free": cluster.type_free[t]}
                    for t in cluster.types
                },
                "drained": [n.name for n in cluster.nodes if not n.healthy],
                "running": len(engine.running),
                "queued": len(engine.queue),
                "fragmentation": round(cluster.fragmentation(), 4),
                "budgets_metered": self.budgets.metered,
            },
            set_aside=aside,
        )

    def _speeds(self, job: Job) -> list[float]:
        """For a placement over several device types, each device's throughput for the job's
        class relative to the pool's reference type: the run balances its ranks' shares by
        them (``scheduler=pool``); empty for a placement on one type."""
        if MIX not in job.device_type:
            return []
        relative, type_of = self.engine.throughputs.relative, self.engine.cluster.device_type
        return [round(relative(job.job_class, type_of(d)), 6) for d in job.devices]

    def _adopt(self) -> None:
        """Give an executor that runs jobs on a cluster the stored handles of the jobs still
        running, so a restarted pool polls them again; a job with none (the pool stopped
        between placing it and storing its handle) is the executor's to report as lost."""
        adopt = getattr(self.executor, "adopt", None)
        if adopt is None:
            return
        handles = self.store.handles()
        running = {job.id: handles.get(job.id) for job in self.engine.running_jobs()}
        adopt(running)
        if running:
            log.info("pool: adopted %d running job(s) from the store", len(running))

    def _reload(self) -> None:
        """After a failed change: memory back to the store's; a store that cannot even be read
        now is read before the next change instead."""
        try:
            self._load()
        except Exception as exc:
            self._stale = True
            log.warning("pool store %s cannot be read back: %s", self.store.path, exc)

    def _hardware(self, cluster_file: str | Path | None) -> Throughputs:
        """The throughput table, from the store when it has the cluster (a restart), else from
        the cluster file, whose nodes and projects go into the store."""
        if self.store.initialised():
            data = json.loads(self.store.meta("cluster") or "{}")
            types = Inventory(self.store.cluster_nodes()).types
            return Throughputs.from_mapping(data.get("throughputs", {}), types)
        if cluster_file is None:
            raise PoolError("a new pool needs --cluster FILE (nodes, throughputs, projects)")
        data = clusterfile.read(cluster_file)
        cluster, throughputs, quotas = clusterfile.build(data)
        self.store.save_cluster(cluster)
        spec = {"throughputs": {**asdict(throughputs), "classes": throughputs.table}}
        spec["throughputs"].pop("_memo", None)
        self.store.set_meta("cluster", json.dumps(spec))
        projects, shared = list(quotas.projects.values()), clusterfile.shared_accounts(data)
        for i, project in enumerate(projects):  # the later of two on one account is named
            check_account(project, projects[:i], shared=project.name in shared)
            self.store.save_project(project)
        return throughputs

    # --- authentication ---------------------------------------------------------------------

    def whoami(self, token: str) -> str:
        """The project a token belongs to, or OPERATOR; 401 for anything else."""
        if not token:
            raise PoolError(
                f"missing token: send 'Authorization: Bearer <token>'; {TOKEN_HELP}", 401
            )
        digest = _hash(token)
        if self.operator_hash and hmac.compare_digest(digest, self.operator_hash):
            return OPERATOR
        for name, token_hash in self.view.tokens.items():
            if hmac.compare_digest(digest, token_hash):
                return name
        raise PoolError(f"invalid token: {TOKEN_HELP}", 401)

    def throttle(self, who: str) -> None:
        """Count one request of ``who`` against its project's rate (429 beyond it); the
        operator's are not limited. Read from the published view: no lock, no store."""
        row = self.view.quotas.get(who)
        if row is not None:
            self.rates.take(who, row["rate"], row["burst"])

    def _visible(self, who: str, job: Job) -> None:
        if who not in (OPERATOR, job.project):
            raise PoolError(f"no job {job.id}", 404)  # other projects' jobs do not exist

    def _seen(self, who: str, job_id: int) -> dict[str, Any]:
        """A job's row in the view, if ``who`` may see it; else 404, as for no job at all."""
        row = self.view.jobs.get(job_id)
        if row is None or who not in (OPERATOR, row["project"]):
            raise PoolError(f"no job {job_id}", 404)
        return row

    @staticmethod
    def _operator(who: str) -> None:
        if who != OPERATOR:
            raise PoolError("this needs the operator token", 403)

    # --- requests ---------------------------------------------------------------------------

    @_then_act
    def submit(self, who: str, body: dict[str, Any], key: str = "") -> dict[str, Any]:
        """Queue a job; with an idempotency ``key`` a project's repeated submission (a client
        retrying after a lost answer) answers the job the first one made, never a second."""
        _only_keys(
            body, {"project", "cards", "job_class", "priority", "name", "payload", "allow_mixing"}
        )
        project = str(body.get("project") or ("" if who == OPERATOR else who))
        if who not in (OPERATOR, project):
            raise PoolError(f"this token belongs to project '{who}', not '{project}'", 403)
        name = str(body.get("name", ""))[:MAX_NAME]
        payload = check_payload(body.get("payload") or {})
        mixing = body.get("allow_mixing", False)
        if not isinstance(mixing, bool):
            raise PoolError(f"allow_mixing must be true or false, got {mixing!r}")
        priority = parse_priority(body.get("priority", "normal"))
        if who != OPERATOR:  # the operator may submit at any class
            self.engine.quotas.project(project).admit_priority(priority)
        self._need_account(project)
        cards, job_class = (
            check_cards(body.get("cards")),
            str(body.get("job_class") or DEFAULT_CLASS),
        )
        asked = (project, cards, job_class, priority, name, payload, mixing)
        digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
        priority = self._admit(project, priority)
        with self.lock:
            earlier = self._earlier(project, key, digest) if key else None
            if earlier is not None:
                return describe(earlier)
            self._within_caps(project, payload)
            now = self.clock()
            with self._change(now):
                job = self.engine.submit(
                    project,
                    cards,
                    now,
                    job_class,
                    priority,
                    name=name,
                    payload=payload,
                    allow_mixing=mixing,
                )
                if key:
                    self._keys.append((project, key, job.id, digest))
            return dict(self.view.jobs[job.id])

    def _earlier(self, project: str, key: str, digest: str) -> Job | None:
        """The job an earlier submission under idempotency ``key`` made (a retry answers it);
        a different request under a used key is a 422, as a client reusing a key by mistake
        must hear, not be answered another job."""
        found = self.store.submitted_as(project, key)
        if found is None or found[0] not in self.engine.jobs:
            return None
        job_id, stored = found
        if stored and stored != digest:
            raise PoolError(
                f"Idempotency-Key {key!r} was used by project '{project}' for job {job_id}, "
                "with a different request; send a new key for a new job, or this key with "
                "the same request to retry it",
                422,
            )
        return self.engine.jobs[job_id]

    def _within_caps(self, name: str, payload: dict[str, Any]) -> None:
        """Refuse a job that would take a project past its caps: ``max_jobs`` queued or
        running (429) or ``max_payload_bytes`` of their payloads (413), each named with the
        way to raise it, so one tenant cannot fill the pool's memory, store and passes."""
        project = self.engine.quotas.project(name)
        live = [
            job
            for job in (*self.engine.queued_jobs(), *self.engine.running_jobs())
            if job.project == name
        ]
        raise_it = f"the operator raises it: PUT /v1/projects/{name} (or the cluster file)"
        if len(live) >= project.max_jobs:
            raise PoolError(
                f"project '{name}' has {len(live)} jobs queued or running, its limit "
                f"(max_jobs {project.max_jobs}); wait for some to end, or {raise_it}",
                429,
            )
        held = sum(self._payload_bytes(job.id, job.payload) for job in live)
        size = len(json.dumps(payload))
        if held + size > project.max_payload_bytes:
            raise PoolError(
                f"project '{name}': this payload of {size} bytes would bring its queued and "
                f"running jobs' payloads to {held + size} bytes, over its limit "
                f"(max_payload_bytes {project.max_payload_bytes}); {raise_it}",
                413,
            )

    def _payload_bytes(self, job_id: int, payload: dict[str, Any]) -> int:
        """A live job's payload size in JSON bytes, measured once (it is fixed until the job
        ends, when the report that changes it also takes the job out of the count)."""
        size = self._sizes.get(job_id)
        if size is None:
            size = self._sizes[job_id] = len(json.dumps(payload))
        return size

    def _need_account(self, name: str) -> None:
        """An executor that runs jobs as their project's account (Slurm) takes no job from a
        project without one: it would run as the pool service, beside its store and tokens."""
        if not getattr(self.executor, "accounts", False):
            return
        project = self.engine.quotas.project(name)
        if not project.run_as:
            raise PoolError(
                f"project '{name}' has no account to run its jobs as; the operator sets one: "
                f"xirang pool quota {name} --run-as USER (or run_as: in the cluster file)",
                403,
            )

    def _admit(self, project: str, priority: int) -> int:
        """The priority the project's budget allows; a budget that refuses is a 402."""
        try:
            return self.budgets.admit(project, priority)
        except BudgetExceeded as exc:
            raise PoolError(str(exc), 402) from None

    @_then_act
    def cancel(self, who: str, job_id: int) -> dict[str, Any]:
        """Cancel a job; cancelling a cancelled one (a retry after a lost answer) answers the
        same again, changing nothing. One that ended otherwise is a 409 naming its state."""
        row = self._seen(who, job_id)
        if row["state"] == "cancelled":
            return row
        with self.lock:
            job = self.engine.job(job_id)
            self._visible(who, job)
            now = self.clock()
            with self._change(now):
                was_running = job.state.value == "running"
                self.engine.cancel(job_id, now)
                if was_running:
                    self._stops.append((job, "cancelled"))
            return describe(self.engine.job(job_id))

    @_then_act
    def complete(
        self, who: str, job_id: int, ok: bool, usage: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """An executor (or the submitter running its own job) reports the end of a job, and
        what it measured (``utilisation``, ``run_ended_at``: kept in the payload for metering)."""
        try:
            report = check_report(usage or {})
        except UsageError as exc:
            raise PoolError(str(exc)) from None
        with self.lock:
            job = self.engine.job(job_id)
            self._visible(who, job)
            now = self.clock()
            with self._change(now):
                self.engine.complete(job_id, now, ok)
                job.payload.update(report)
            return describe(self.engine.job(job_id))

    @_then_act
    def drain(self, who: str, node: str, reason: str) -> dict[str, Any]:
        self._operator(who)
        with self.lock:
            now = self.clock()
            with self._change(now):
                requeued = self._take_out(node, now, reason[:MAX_NAME] or "drained by operator")
            self._tell_executor(node, reason)
            return {"node": node, "requeued": requeued}

    def _take_out(self, node: str, now: float, reason: str) -> list[int]:
        """Drain ``node`` in the current change: its jobs are requeued and told to stop."""
        requeued = self.engine.drain(node, now, reason)
        self._stops += [(job, f"node {node} drained") for job in requeued]
        return [job.id for job in requeued]

    def _tell_executor(self, node: str, reason: str) -> None:
        if isinstance(self.executor, DrainingExecutor):
            self._outbox.append(Action("drain", node=node, reason=reason))

    @_then_act
    def straggler(self, who: str, job_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """A running job's run reports a straggler rank (its executor passes on the run's
        event). With ``drain_stragglers`` on and a drain that pays (:mod:`.stragglers`), the
        rank's node is drained and the job requeued without it; either way the job's history
        records the report and what the pool did."""
        try:
            report = StragglerReport.from_body(body)
        except ValueError as exc:
            raise PoolError(str(exc)) from None
        with self.lock:
            job = self.engine.job(job_id)
            self._visible(who, job)
            node = self._rank_node(job, report)
            prediction = predict(report)
            why = self._keep_node(job, node, prediction)
            detail = {
                "rank": report.rank,
                "speed_ratio": report.speed_ratio,
                "node": node,
                "action": "reported" if why else "drained",
                "why": why or f"the run finishes about {prediction.saved_s:.0f} s sooner",
            }
            requeued: list[int] = []
            now = self.clock()
            with self._change(now, schedule=not why):
                self.engine.note_straggler(job, now, **detail)
                if not why:
                    reason = f"straggler: job {job.id} rank {report.rank} at {report.speed_ratio}"
                    requeued = self._take_out(node, now, reason)
            if not why:
                self._tell_executor(node, str(detail["why"]))
            return {**detail, **asdict(prediction), "requeued": requeued}

    def _rank_node(self, job: Job, report: StragglerReport) -> str:
        """The node of the report's rank: the job's devices dealt to its ranks in order, the
        same number each (as the executor starts them)."""
        if job.state is not JobState.RUNNING:
            raise PoolError(f"job {job.id} is {job.state.value}; only a running job has ranks", 409)
        ranks = len(report.speeds)
        if len(job.devices) % ranks:
            raise PoolError(
                f"speeds: {ranks} ranks do not divide job {job.id}'s {len(job.devices)} devices; "
                f"a rank count that does (e.g. {len(job.devices)})"
            )
        device = job.devices[report.rank * (len(job.devices) // ranks)]
        return self.engine.cluster.node_of(device).name

    def _keep_node(self, job: Job, node_name: str, prediction: Prediction) -> str:
        """Why the straggler's node stays in service ("" when it is to be drained)."""
        if not self.drain_stragglers:
            return "the pool does not drain for stragglers (xirang pool serve --drain-stragglers)"
        if prediction.saved_s <= 0:
            return f"a drain would not pay (it would cost {-prediction.saved_s:.0f} s)"
        cluster = self.engine.cluster
        node = cluster.node(node_name)
        others = {
            self.engine.jobs[i].project
            for _, i in self.engine.running
            if any(cluster.node_of(d) is node for d in self.engine.jobs[i].devices)
        }
        if others - {job.project}:
            return f"node {node_name} also runs other projects' jobs"
        types = {cluster.device_type(d) for d in job.devices}
        free = (n.free for n in cluster.nodes if n.healthy and n is not node and n.type in types)
        elsewhere = sum(len(f) for f in free)
        kept = sum(1 for d in job.devices if cluster.node_of(d) is not node)
        if elsewhere + kept < len(job.devices):
            return f"no room to place job {job.id} again without node {node_name}"
        return ""

    @_then_act
    def undrain(self, who: str, node: str) -> dict[str, Any]:
        self._operator(who)
        with self.lock:
            now = self.clock()
            with self._change(now):
                self.engine.undrain(node, now)
            return {"node": node, "healthy": True}

    @_then_act
    def set_quota(self, who: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create or edit a project; a new project's token is returned once, never again."""
        self._operator(who)
        _only_keys(
            body,
            {
                "guaranteed",
                "borrow_limit",
                "team",
                "rotate_token",
                "max_priority",
                "run_as",
                "shared_account",
                "umask",
                "max_jobs",
                "max_payload_bytes",
                "rate",
                "burst",
            },
        )
        with self.lock:
            old = self.engine.quotas.projects.get(name)
            highest = body.get("max_priority", old.max_priority if old else DEFAULT_MAX_PRIORITY)
            project = Project(
                name,
                _count(body.get("guaranteed", old.guaranteed if old else 0), "guaranteed"),
                _limit(body.get("borrow_limit", old.borrow_limit if old else None)),
                str(body.get("team", old.team if old else "default")),
                old.token_hash if old else "",
                parse_priority(highest),
                str(body.get("run_as", old.run_as if old else "")),
                body.get("max_jobs", old.max_jobs if old else DEFAULT_MAX_JOBS),
                body.get(
                    "max_payload_bytes", old.max_payload_bytes if old else DEFAULT_MAX_PAYLOAD_BYTES
                ),
                body.get("rate", old.rate if old else 0.0),
                body.get("burst", old.burst if old else 0),
                _umask(body.get("umask"), old.umask if old else DEFAULT_UMASK),
            ).check()
            if old is None or project.run_as != old.run_as:  # an edit keeps what was agreed
                others = self.engine.quotas.projects.values()
                check_account(project, others, shared=body.get("shared_account") is True)
            token = ""
            if not project.token_hash or body.get("rotate_token"):
                token = new_token()
                project.token_hash = _hash(token)
            with self._change(self.clock()):
                self.engine.set_quota(project)
                self._projects[project.name] = project
                if old is None or _cards(old) != _cards(project) or old.run_as != project.run_as:
                    self._limits.append(project)
                # its running jobs were re-split into guaranteed and borrowed: stored too
                self._jobs.update(
                    (j.id, j) for j in self.engine.running_jobs() if j.project == name
                )
            out = self._quota_row(self.engine.quotas.projects[name])
            return {**out, "token": token} if token else out

    # --- views ------------------------------------------------------------------------------

    def job(self, who: str, job_id: int) -> dict[str, Any]:
        return priced([self._seen(who, job_id)], self.budgets.governor.store)[0]

    def job_charge(self, who: str, job_id: int) -> dict[str, Any] | None:
        """The job's charge so far, as the pool's metering prices it (None: not metered),
        from this job's rows alone (its own, its usage segments, the projects' teams) and
        without the service's lock: pricing it from the whole pool's state under the lock
        took 0.86 s at 1,500 jobs, and every other tenant's request waited behind it."""
        from xirang_service.console.state import PoolState

        self._seen(who, job_id)
        if not self.budgets.metered:
            return None
        now = self.clock()
        jobs = self.store.jobs(ids=[job_id])
        mixed = any(len(job.held_types) > 1 for job in jobs if job.state.value == "running")
        state = PoolState(
            nodes=[],
            jobs=jobs,
            projects=self.store.projects(),
            segments=self.store.job_segments(job_id),
            read_at=now,
            # a running job over several types is charged per type: each device's type
            device_types={d["id"]: d["type"] for d in self.store.devices()} if mixed else {},
        )
        return self.budgets.job_charge(state, job_id, now)

    def jobs(self, who: str, state: str = "", priced: bool = True) -> list[dict[str, Any]]:
        """The jobs ``who`` may see (in ``state``), by id, each with its cost (``priced``
        False: without, for a caller that prices only the page it sends, :meth:`price`). The
        rows are picked once per view and asker: a tenant polling its queue repeats the same
        question far more often than the pool changes, and each pick scans every job the pool
        ever held."""
        view = self.view
        rows = view.picked.get((who, state))
        if rows is None:
            rows = view.picked[(who, state)] = sorted(
                (
                    row
                    for row in view.jobs.values()
                    if who in (OPERATOR, row["project"]) and (not state or row["state"] == state)
                ),
                key=_by_id,
            )
        return self.price(rows) if priced else rows

    def price(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Job rows with their cost so far (the cost store has its own lock)."""
        return priced(rows, self.budgets.governor.store)

    def job_history(self, who: str, job_id: int) -> dict[str, Any]:
        """Job ``job_id``'s history (:mod:`xirang_service.pool.history`), read from the store
        without the service's lock, as the other read routes; 404 for a job unknown or
        another project's."""
        self._seen(who, job_id)
        view = self.view
        found = job_history(self.store, job_id, self.budgets.governor.store)
        if found is None:
            raise PoolError(f"no job {job_id}", 404)
        if found["state"] == "queued":
            found["events"].append(waiting_event(self.clock(), self._waiting_reason(view, job_id)))
        return found

    @staticmethod
    def _waiting_reason(view: View, job_id: int) -> str:
        """Why a queued job has not started: the last pass's reason, else its place in line
        (the pass stopped before it: the pool was full, or jobs ahead must start first)."""
        if job_id in view.waiting:
            return view.waiting[job_id]
        ahead = view.queue.index(job_id) if job_id in view.queue else 0
        return f"waiting its turn: {ahead} job(s) ahead of it in the queue"

    def queue(self, who: str) -> list[dict[str, Any]]:
        view = self.view
        rows = ({**view.jobs[job_id], "position": n} for n, job_id in enumerate(view.queue, 1))
        return [r for r in rows if who in (OPERATOR, r["project"])]

    def quotas(self, who: str) -> list[dict[str, Any]]:
        return [row for name, row in self.view.quotas.items() if who in (OPERATOR, name)]

    def status(self, who: str) -> dict[str, Any]:
        return {
            "you": "operator" if who == OPERATOR else who,
            **self.view.summary,
            "projects": [
                {k: v for k, v in row.items() if k not in _CAPS} for row in self.quotas(who)
            ],
            "set_aside": self.view.set_aside if who == OPERATOR else [],
        }

    def devices(self, who: str) -> list[dict[str, Any]]:
        """Every device and whether it is in use; a project token sees only its own jobs' ids
        (another project's job is just ``used``)."""
        jobs = self.view.jobs
        rows = self.store.devices()
        for row in rows:
            holder = jobs.get(row["job_id"]) if row["job_id"] is not None else None
            row["used"] = row["job_id"] is not None
            if who != OPERATOR and (holder is None or holder["project"] != who):
                row["job_id"] = None
        return rows

    def usage(
        self, who: str, since: float = 0.0, until: float = float("inf"), bucket: float = 3600.0
    ) -> list[dict[str, Any]]:
        """Device- and card-seconds per project, type and bucket; a project sees its own."""
        for key, value in (("since", since), ("until", until)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise PoolError(f"{key} must be a number of epoch seconds, got {value!r}")
        project = None if who == OPERATOR else who
        return self.store.usage(since, until, check_bucket(bucket), project)

    def _quota_row(self, project: Project) -> dict[str, Any]:
        quotas = self.engine.quotas
        return {
            "project": project.name,
            "team": project.team,
            "guaranteed": project.guaranteed,
            "borrow_limit": project.borrow_limit,
            "max_priority": priority_name(project.max_priority),
            "run_as": project.run_as,
            "max_jobs": project.max_jobs,
            "max_payload_bytes": project.max_payload_bytes,
            "rate": project.rate,
            "burst": project.burst,
            "umask": f"{project.umask:03o}",
            "used": quotas.used[project.name],
            "borrowed": quotas.borrowed[project.name],
        }

    # --- executors and persistence ----------------------------------------------------------

    @_then_act
    def tick(self) -> None:
        """Poll the executor, store the ends it found (a remote executor's: those its actor
        found since the last tick), enforce budgets and schedule again (called
        periodically). A store that refuses the write is logged and the tick retried next time
        (the ends the executor reported are kept until they are stored)."""
        self._kick(poll=True)
        with self.lock:
            now = self.clock()
            try:
                with self._change(now, schedule=False):  # stored first: metering reads the store
                    for job_id, ok in self._ended:
                        job = self.engine.jobs.get(job_id)
                        if job is not None and job.state.value == "running":
                            self.engine.complete(job_id, now, ok)
                            job.payload.update(self._measured(job_id))
                self._ended.clear()
                with self._change(now):
                    self._enforce_budgets(now)
            except StoreUnavailable as exc:
                log.warning("pool tick: %s; retrying at the next tick", exc)

    def _measured(self, job_id: int) -> dict[str, float]:
        """What an executor that measures its jobs (``usage(job_id)``, e.g. Slurm's end time)
        reported for one that ended; a report the meter cannot use is dropped, not fatal."""
        usage = getattr(self.executor, "usage", None)
        try:
            return check_report(usage(job_id)) if usage is not None else {}
        except UsageError:
            return {}

    def _enforce_budgets(self, now: float) -> None:
        """Meter the pool's usage up to ``now``, drop the queued jobs of a spent
        ``lower_priority`` budget to the lowest class, then end every job a ``checkpoint_stop``
        budget stops: a running one is stopped as preemption stops it (TERM, so it
        checkpoints), and, like a queued one, ends ``cancelled`` with a ``budget_stopped`` event
        naming the budget, so the scheduler never starts it again."""
        if self.budgets.metered:
            self.budgets.meter_pool(self.store, now)
        for job, priority, reason in self.budgets.to_demote(list(self.engine.queued_jobs())):
            self.engine.reprioritise(job.id, priority, now, f"budget: {reason}")
        live = [*self.engine.running_jobs(), *self.engine.queued_jobs()]
        for job, reason in self.budgets.to_stop(live):
            if job.state.value == "running":
                self._stops.append((job, f"budget: {reason}"))
            self.engine.cancel(job.id, now)
            self.engine.events.append(Event(now, "budget_stopped", job.id, {"reason": reason}))

    @contextmanager
    def _change(self, now: float, schedule: bool = True) -> Iterator[None]:
        """One request's change: the body changes the engine, a scheduling pass follows, and
        all of it is stored in one transaction before the executor hears of it. A body that
        fails after changing memory, or a store that refuses the write, rebuilds the engine
        from the store: memory and store stay as they were (StoreUnavailable for the latter)."""
        if self._stale:
            try:
                self._load()
            except StoreUnavailable:
                raise
            except Exception as exc:
                raise StoreUnavailable(f"the pool store {self.store.path} cannot be read") from exc
        try:
            yield
            if schedule:
                self.engine.schedule(now)
            events, changed = self._commit()
            self._notify(events)
            self._publish(changed)
        except BaseException:
            dirty = bool(self.engine.events or self._projects or self._jobs or self._stops)
            self._limits.clear()
            self.engine.events.clear()
            self._projects.clear()
            self._jobs.clear()
            self._stops.clear()
            self._keys.clear()
            if dirty:
                self._reload()
            raise

    def _commit(self) -> tuple[list[Event], list[Job]]:
        """Store every event since the last commit, with the jobs and projects they changed;
        those events and jobs."""
        events = list(self.engine.events)
        changed = {e.job: self.engine.jobs[e.job] for e in events if e.job is not None}
        changed.update(self._jobs)
        try:
            self.store.persist(
                self.engine, changed.values(), events, self._projects.values(), self._keys
            )
        except StoreUnavailable as exc:  # the database is away: its own message, Retry-After
            log.warning("pool store %s: %s", self.store.path, exc)
            raise
        except Exception as exc:  # sqlite3, psycopg, an unencodable string: nothing was stored
            log.warning("pool store %s refused a write: %s", self.store.path, exc)
            raise StoreUnavailable(
                f"the pool store {self.store.path} refused the write "
                f"({type(exc).__name__}: {str(exc)[:200]}); nothing changed, try again"
            ) from None
        self.engine.events.clear()
        self._projects.clear()
        self._jobs.clear()
        self._keys.clear()
        return events, list(changed.values())

    def _notify(self, events: list[Event]) -> None:
        """Queue what the stored change asks of the executor: limits first (a start may need
        its project's), then stops, then starts."""
        limits, self._limits = self._limits, []
        if isinstance(self.executor, LimitingExecutor):
            types = tuple(self.engine.cluster.types)
            self._outbox.extend(
                Action("limit", account=p.run_as, project=p.name, cards=_cards(p), types=types)
                for p in limits
            )
        stops, self._stops = self._stops, []
        for stopped, reason in stops:
            self._stop(stopped, reason)
        for event in events:
            job = self.engine.jobs.get(event.job) if event.job is not None else None
            if job is None:
                continue
            if event.kind == "started" and job.state.value == "running":
                nodes = sorted({self.engine.cluster.node_of(d).name for d in job.devices})
                leaves = span(self.engine.cluster, job.devices)["leaves"]
                project = self.engine.quotas.project(job.project)
                self._outbox.append(
                    Action("start", _copy(job), tuple(nodes), leaves, project.run_as, project.umask)
                )
                self._starting.add(job.id)
            elif event.kind == "preempted":
                reason = event.detail.get("reason") or f"preempted by job {event.detail.get('by')}"
                self._stop(job, reason)

    def _stop(self, job: Job, reason: str) -> None:
        """Queue a stop; a start of the job still queued is dropped instead (the executor never
        heard of it: a burst of submits and cancels while Slurm stalls costs it nothing)."""
        queued = [a for a in self._outbox if a.kind == "start" and a.job and a.job.id == job.id]
        if queued:
            self._outbox.remove(queued[0])
            self._starting.discard(job.id)
            return
        self._outbox.append(Action("stop", _copy(job), reason=reason))

    # --- the executor's calls, outside the lock ---------------------------------------------

    def _kick(self, poll: bool = False) -> None:
        """Have the executor make the calls queued so far (and, ``poll``, poll it): the actor
        thread of a remote executor, else this thread, now (it holds no lock of the
        service's: a local executor answers at once)."""
        if not getattr(self.executor, "remote", False):
            if poll:
                self._act(poll)
            # a thread already calling the executor takes what is queued before it lets go
            # (and one that finds more queued once it let go takes that too)
            while self._outbox and self._acting.acquire(blocking=False):
                try:
                    self._drain()
                finally:
                    self._acting.release()
            return
        with self._rounds:
            self._asked += 1
            self._poll_asked |= poll
            self._rounds.notify_all()

    def _actor(self) -> None:
        """A remote executor's calls, one round per kick, until :meth:`close`."""
        while True:
            with self._rounds:
                self._rounds.wait_for(lambda: self._asked > self._done or self._closing)
                if self._closing:
                    return
                target, poll, self._poll_asked = self._asked, self._poll_asked, False
            try:
                self._act(poll)
            except Exception:  # a bug must not end the thread every later start needs
                log.exception("pool: the executor's actor failed a round; going on")
            with self._rounds:
                self._done = target
                self._rounds.notify_all()

    def settle(self, timeout: float = 120.0) -> None:
        """Wait until the executor has made every call asked of it so far (a test, a tool
        that reads the executor's own state after a request)."""
        with self._rounds:
            target = self._asked
            if not self._rounds.wait_for(lambda: self._done >= target, timeout):
                raise TimeoutError(f"the pool's executor calls took over {timeout:.0f} s")

    def _act(self, poll: bool) -> None:
        """Make the queued executor calls in order, then poll: each outside the service lock
        (which is taken only to take an action and to store what it learnt)."""
        with self._acting:
            self._drain()
            if poll:
                ended = self.executor.poll()
                with self.lock:  # the ends of an earlier start of a job started again: dropped
                    self._ended += [e for e in ended if e[0] not in self._starting]
                self._learn_fates(set())

    def _drain(self) -> None:
        """Make the queued executor calls in order (the caller holds ``_acting``)."""
        while True:
            with self.lock:
                if not self._outbox:
                    return
                action = self._outbox.popleft()
            self._do(action)
            self._learn_fates({action.job.id} if action.job is not None else set())

    def _do(self, action: Action) -> None:
        """One executor call; one that fails is logged, and a start that fails ends its job
        failed at the next tick (a stop that fails is the executor's to retry)."""
        try:
            if action.kind == "start":
                self._start(action)
            elif action.kind == "stop":
                assert action.job is not None
                self.executor.stop(action.job, action.reason)
            elif action.kind == "drain" and isinstance(self.executor, DrainingExecutor):
                self.executor.drain(action.node, action.reason)
            elif action.kind == "limit" and isinstance(self.executor, LimitingExecutor):
                self.executor.limit(action.project, action.account, action.cards, action.types)
        except Exception as exc:
            log.warning("pool: the executor could not %s: %s", action.kind, exc)

    def _start(self, action: Action) -> None:
        """Start a placed job and store its handle at once; an executor that refuses it (sbatch
        fails) ends it failed at the next tick instead of stopping the service."""
        job = action.job
        assert job is not None
        handle = None
        try:
            if getattr(self.executor, "accounts", False) and not action.account:
                raise PoolError(f"project '{job.project}' has no run_as account")
            self._intend(job)
            with job_umask(action.umask):  # the job's processes inherit it
                handle = self.executor.start(job, list(action.nodes), action.leaves, action.account)
        except Exception as exc:
            log.warning("pool: the executor could not start job %d: %s", job.id, exc)
            with self.lock:
                self._ended.append((job.id, False))
        with self.lock:
            self._starting.discard(job.id)
            if handle is None:
                return
            try:
                self.store.save_handle(job.id, str(handle))
            except Exception as exc:  # still polled from memory; a restart finds it by intent
                log.warning("pool: job %d's handle %s was not stored: %s", job.id, handle, exc)

    def _intend(self, job: Job) -> None:
        """Store the name an executor is about to submit ``job`` under (its ``intent``), before
        it submits: a pool that dies between the submission and storing its handle finds the
        job by that name after a restart, so none runs that the pool does not know of. A store
        that cannot take it stops the start (an error, handled as a refused start)."""
        intent = getattr(self.executor, "intent", None)
        if intent is not None:
            name = str(intent(job))
            with self.lock:
                self.store.save_handle(job.id, name)

    def _fate(self, job_id: int) -> str:
        """What a running job's row says instead of ``running``, if anything."""
        if job_id in self._starting and getattr(self.executor, "remote", False):
            return "submitting"
        return self._fates.get(job_id, "")

    def _learn_fates(self, acted: set[int]) -> None:
        """Take the executor's word on the jobs it is unsure of and show it in their rows (and
        the rows of the jobs it ``acted`` on)."""
        fates: dict[int, str] = getattr(self.executor, "fates", dict)()
        with self.lock:
            old, self._fates = self._fates, fates
            touched = {j for j in old.keys() | fates.keys() if old.get(j) != fates.get(j)}
            jobs = [self.engine.jobs[j] for j in touched | acted if j in self.engine.jobs]
            jobs = [job for job in jobs if self._shown(job) != self._state(job)]
            if jobs:
                self._publish(jobs)

    def _shown(self, job: Job) -> str:
        row = self.view.jobs.get(job.id)
        return row["state"] if row is not None else ""

    def _state(self, job: Job) -> str:
        """The state a job's row shows: its own, or, running, what its executor says."""
        fate = self._fate(job.id) if job.state is JobState.RUNNING else ""
        return fate or job.state.value


def _copy(job: Job) -> Job:
    """A job as a change left it, for a call made after the lock is let go (the engine's own
    may change meanwhile)."""
    copied = copy.copy(job)
    copied.payload = dict(job.payload)
    return copied


#: a project's caps: in its ``/v1/projects`` row, not in the status' project table
_CAPS = ("max_jobs", "max_payload_bytes", "rate", "burst", "umask")


def describe(job: Job, speeds: list[float] | None = None) -> dict[str, Any]:
    """A job as the API shows it; ``device_speeds``: its devices' relative speeds when they
    are of several types (:meth:`PoolService._speeds`)."""
    return {
        "id": job.id,
        "name": job.name,
        "project": job.project,
        "cards": job.cards,
        "job_class": job.job_class,
        "priority": priority_name(job.priority),
        "state": job.state.value,
        "submitted": job.submitted,
        "started": job.started,
        "finished": job.finished,
        "device_type": job.device_type,
        "devices": list(job.devices),
        "device_speeds": speeds or [],
        "allow_mixing": job.allow_mixing,
        "borrowed": job.borrowed,
        "preemptions": job.preemptions,
        "requeues": job.requeues,
        "payload": dict(job.payload),  # a copy: views keep it while the job's may change
        "tokens": job.payload.get("tokens"),
    }


def _by_id(row: dict[str, Any]) -> int:
    return int(row["id"])


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _only_keys(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise PoolError(f"unknown field '{unknown[0]}'; allowed: {', '.join(sorted(allowed))}")


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000_000:
        raise PoolError(f"{what} must be a whole number of cards >= 0, got {value!r}")
    return value


def _umask(value: Any, old: int) -> int:
    """A umask given as octal text ("077"), else the project's ``old`` one."""
    if value is None:
        return old
    if not isinstance(value, str) or not value.isdigit() or set(value) - set("01234567"):
        raise PoolError(f"umask must be an octal mode such as 077, got {value!r}")
    return int(value, 8)


def _cards(project: Project) -> int | None:
    """The most cards a project's jobs may hold at once: guaranteed plus borrowable (None:
    unlimited borrowing)."""
    if project.borrow_limit is None:
        return None
    return project.guaranteed + project.borrow_limit


def _limit(value: Any) -> int | None:
    return None if value is None else _count(value, "borrow_limit")
