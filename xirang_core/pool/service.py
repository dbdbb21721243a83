"""The pool service: one engine, its store (SQLite or PostgreSQL), project tokens and the executors.

Every request runs under one lock: validate, change the engine, run a scheduling pass, write
the changed jobs and the events in one transaction, then hand ``started``/``preempted`` events
to the executor. A restart rebuilds the engine from the store, so no queued or running job is
lost. Tokens are stored only as SHA-256 hashes; a project token sees and cancels only its own
project's jobs, the operator token sees and does everything.

Budgets (xirang_core.cost.budgets) act here: a submission is admitted, demoted or refused (402)
by the governor, and each tick meters the pool's usage and ends the jobs a budget stops.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from xirang_core.cost.budgets import PoolBudgets
from xirang_core.cost.errors import BudgetExceeded
from xirang_core.cost.usage import UsageError, check_report
from xirang_core.pool import clusterfile
from xirang_core.pool.cards import DEFAULT_CLASS, Throughputs
from xirang_core.pool.cluster import Cluster
from xirang_core.pool.engine import Event, PoolEngine
from xirang_core.pool.errors import TOKEN_HELP, PoolError
from xirang_core.pool.jobs import Job, check_cards, parse_priority, priority_name
from xirang_core.pool.placement import span
from xirang_core.pool.policy import load_policy
from xirang_core.pool.quota import Project
from xirang_core.pool.store import PoolStore

OPERATOR = "*operator*"
MAX_NAME = 200


class Executor(Protocol):
    """Runs what the pool placed: told when a job starts and when it must stop."""

    def start(self, job: Job, nodes: list[str], leaves: int = 1) -> Any: ...

    def stop(self, job: Job, reason: str) -> None: ...

    def poll(self) -> list[tuple[int, bool]]:
        """Jobs that ended since the last poll, with whether they succeeded (an executor may
        also offer ``usage(job_id)``: what it measured of an ended job, for cost metering)."""


class RecordingExecutor:
    """The default for ``xirang pool serve``: the submitter runs its own job (the local
    executor), so the service only records what it was told."""

    name = "local"

    def __init__(self) -> None:
        self.started: list[int] = []
        self.stopped: list[int] = []

    def start(self, job: Job, nodes: list[str], leaves: int = 1) -> None:
        self.started.append(job.id)

    def stop(self, job: Job, reason: str) -> None:
        self.stopped.append(job.id)

    def poll(self) -> list[tuple[int, bool]]:
        return []


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
    ) -> None:
        self.store = store
        self.clock = clock
        self.budgets = budgets or PoolBudgets.open()
        self.lock = threading.RLock()
        self.executor = executor or RecordingExecutor()
        self.operator_hash = _hash(operator_token) if operator_token else ""
        cluster, throughputs = self._hardware(cluster_file)
        self.engine = PoolEngine(
            cluster, throughputs, load_policy(policy), preferences=self.budgets.preferences
        )
        self.budgets.check_types(cluster.types)
        self.restored = store.load_into(self.engine, clock())
        self._apply(self.engine.schedule(clock()))

    def _hardware(self, cluster_file: str | Path | None) -> tuple[Cluster, Throughputs]:
        """From the store when it has the cluster (a restart), else from the cluster file."""
        if self.store.initialised():
            data = json.loads(self.store.meta("cluster") or "{}")
            cluster = Cluster(self.store.cluster_nodes())
            return cluster, Throughputs.from_mapping(data.get("throughputs", {}), cluster.types)
        if cluster_file is None:
            raise PoolError("a new pool needs --cluster FILE (nodes, throughputs, projects)")
        data = clusterfile.read(cluster_file)
        cluster, throughputs, quotas = clusterfile.build(data)
        self.store.save_cluster(cluster)
        spec = {"throughputs": {**asdict(throughputs), "classes": throughputs.table}}
        spec["throughputs"].pop("_memo", None)
        self.store.set_meta("cluster", json.dumps(spec))
        for project in quotas.projects.values():
            self.store.save_project(project)
        return cluster, throughputs

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
        for project in self.engine.quotas.projects.values():
            if project.token_hash and hmac.compare_digest(digest, project.token_hash):
                return project.name
        raise PoolError(f"invalid token: {TOKEN_HELP}", 401)

    def _visible(self, who: str, job: Job) -> None:
        if who not in (OPERATOR, job.project):
            raise PoolError(f"no job {job.id}", 404)  # other projects' jobs do not exist

    @staticmethod
    def _operator(who: str) -> None:
        if who != OPERATOR:
            raise PoolError("this needs the operator token", 403)

    # --- requests ---------------------------------------------------------------------------

    def submit(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        _only_keys(
            body, {"project", "cards", "job_class", "priority", "name", "payload", "allow_mixing"}
        )
        project = str(body.get("project") or ("" if who == OPERATOR else who))
        if who not in (OPERATOR, project):
            raise PoolError(f"this token belongs to project '{who}', not '{project}'", 403)
        name = str(body.get("name", ""))[:MAX_NAME]
        payload = body.get("payload") or {}
        if not isinstance(payload, dict):
            raise PoolError("payload must be a JSON object")
        mixing = body.get("allow_mixing", False)
        if not isinstance(mixing, bool):
            raise PoolError(f"allow_mixing must be true or false, got {mixing!r}")
        priority = self._admit(project, parse_priority(body.get("priority", "normal")))
        with self.lock:
            now = self.clock()
            job = self.engine.submit(
                project,
                check_cards(body.get("cards")),
                now,
                str(body.get("job_class") or DEFAULT_CLASS),
                priority,
                name=name,
                payload=payload,
                allow_mixing=mixing,
            )
            self._apply(self.engine.schedule(now))
            return describe(job)

    def _admit(self, project: str, priority: int) -> int:
        """The priority the project's budget allows; a budget that refuses is a 402."""
        try:
            return self.budgets.admit(project, priority)
        except BudgetExceeded as exc:
            raise PoolError(str(exc), 402) from None

    def cancel(self, who: str, job_id: int) -> dict[str, Any]:
        with self.lock:
            job = self.engine.job(job_id)
            self._visible(who, job)
            now = self.clock()
            was_running = job.state.value == "running"
            self.engine.cancel(job_id, now)
            if was_running:
                self.executor.stop(job, "cancelled")
            self._apply(self.engine.schedule(now))
            return describe(job)

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
            self.engine.complete(job_id, now, ok)
            job.payload.update(report)
            self._apply(self.engine.schedule(now))
            return describe(job)

    def drain(self, who: str, node: str, reason: str) -> dict[str, Any]:
        self._operator(who)
        with self.lock:
            now = self.clock()
            requeued = self.engine.drain(node, now, reason[:MAX_NAME] or "drained by operator")
            for job in requeued:
                self.executor.stop(job, f"node {node} drained")
            if hasattr(self.executor, "drain"):  # e.g. Slurm: scontrol update State=DRAIN
                self.executor.drain(node, reason)
            self._apply(self.engine.schedule(now))
            return {"node": node, "requeued": [j.id for j in requeued]}

    def undrain(self, who: str, node: str) -> dict[str, Any]:
        self._operator(who)
        with self.lock:
            now = self.clock()
            self.engine.undrain(node, now)
            self._apply(self.engine.schedule(now))
            return {"node": node, "healthy": True}

    def set_quota(self, who: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create or edit a project; a new project's token is returned once, never again."""
        self._operator(who)
        _only_keys(body, {"guaranteed", "borrow_limit", "team", "rotate_token"})
        with self.lock:
            old = self.engine.quotas.projects.get(name)
            project = Project(
                name,
                _count(body.get("guaranteed", old.guaranteed if old else 0), "guaranteed"),
                _limit(body.get("borrow_limit", old.borrow_limit if old else None)),
                str(body.get("team", old.team if old else "default")),
                old.token_hash if old else "",
            )
            token = ""
            if not project.token_hash or body.get("rotate_token"):
                token = secrets.token_urlsafe(24)
                project.token_hash = _hash(token)
            self.engine.set_quota(project)
            self.store.save_project(project)
            self._apply(self.engine.schedule(self.clock()))
            out = self._quota_row(project)
            return {**out, "token": token} if token else out

    # --- views ------------------------------------------------------------------------------

    def job(self, who: str, job_id: int) -> dict[str, Any]:
        with self.lock:
            job = self.engine.job(job_id)
            self._visible(who, job)
            return describe(job)

    def job_charge(self, who: str, job_id: int) -> dict[str, Any] | None:
        """The job's charge so far, as the pool's metering prices it (None: not metered)."""
        from xirang_core.console.state import read_state

        with self.lock:
            self._visible(who, self.engine.job(job_id))
            now = self.clock()
            state = read_state(self.store, now, usage=True)
        return self.budgets.job_charge(state, job_id, now)

    def jobs(self, who: str, state: str = "") -> list[dict[str, Any]]:
        with self.lock:
            jobs = self.engine.jobs.values()
            return [
                describe(j)
                for j in jobs
                if who in (OPERATOR, j.project) and (not state or j.state.value == state)
            ]

    def queue(self, who: str) -> list[dict[str, Any]]:
        with self.lock:
            rows = [describe(j) for j in self.engine.queued_jobs()]
        for position, row in enumerate(rows, 1):
            row["position"] = position
        return [r for r in rows if who in (OPERATOR, r["project"])]

    def quotas(self, who: str) -> list[dict[str, Any]]:
        with self.lock:
            projects = self.engine.quotas.projects.values()
            return [self._quota_row(p) for p in projects if who in (OPERATOR, p.name)]

    def status(self, who: str) -> dict[str, Any]:
        with self.lock:
            cluster = self.engine.cluster
            return {
                "you": "operator" if who == OPERATOR else who,
                "policy": self.engine.policy.name,
                "executor": getattr(self.executor, "name", "local"),
                "types": {
                    t: {"capacity": cluster.capacity(t), "free": cluster.type_free[t]}
                    for t in cluster.types
                },
                "drained": [n.name for n in cluster.nodes if not n.healthy],
                "running": sum(1 for _ in self.engine.running),
                "queued": sum(1 for _ in self.engine.queue),
                "fragmentation": round(cluster.fragmentation(), 4),
                "budgets_metered": self.budgets.metered,
                "projects": self.quotas(who),
            }

    def _quota_row(self, project: Project) -> dict[str, Any]:
        quotas = self.engine.quotas
        return {
            "project": project.name,
            "team": project.team,
            "guaranteed": project.guaranteed,
            "borrow_limit": project.borrow_limit,
            "used": quotas.used[project.name],
            "borrowed": quotas.borrowed[project.name],
        }

    # --- executors and persistence ----------------------------------------------------------

    def tick(self) -> None:
        """Collect finished jobs from the executor, enforce budgets and schedule again (called
        periodically)."""
        with self.lock:
            ended = self.executor.poll()
            now = self.clock()
            for job_id, ok in ended:
                job = self.engine.jobs.get(job_id)
                if job is not None and job.state.value == "running":
                    self.engine.complete(job_id, now, ok)
                    job.payload.update(self._measured(job_id))
            self._apply([])  # persist first: metering reads the store
            self._enforce_budgets(now)
            self._apply(self.engine.schedule(now))

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
                self.executor.stop(job, f"budget: {reason}")
            self.engine.cancel(job.id, now)
            self.engine.events.append(Event(now, "budget_stopped", job.id, {"reason": reason}))

    def _apply(self, _: list[Event]) -> None:
        """Persist every event since the last call and hand starts/stops to the executor."""
        events = list(self.engine.events)
        self.engine.events.clear()
        changed = {e.job: self.engine.jobs[e.job] for e in events if e.job is not None}
        self.store.persist(self.engine, changed.values(), events)
        for event in events:
            job = self.engine.jobs.get(event.job) if event.job is not None else None
            if job is None:
                continue
            if event.kind == "started" and job.state.value == "running":
                nodes = sorted({self.engine.cluster.node_of(d).name for d in job.devices})
                leaves = span(self.engine.cluster, job.devices)["leaves"]
                self.executor.start(job, nodes, leaves)
            elif event.kind == "preempted":
                reason = event.detail.get("reason") or f"preempted by job {event.detail.get('by')}"
                self.executor.stop(job, reason)


def describe(job: Job) -> dict[str, Any]:
    """A job as the API shows it."""
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
        "allow_mixing": job.allow_mixing,
        "borrowed": job.borrowed,
        "preemptions": job.preemptions,
        "requeues": job.requeues,
        "payload": job.payload,
    }


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


def _limit(value: Any) -> int | None:
    return None if value is None else _count(value, "borrow_limit")
