"""A pool job's history, told from what the store already keeps: the events the engine records
for every transition (``submitted``, ``started``, ``preempted`` with who and why, ``requeued``,
``reprioritised``, ``budget_stopped``, the end), the job's row (tokens its executor reported)
and the charges the pool's metering recorded in the cost store.

``xirang pool history JOB``, ``GET /v1/jobs/<id>/history`` and the console's job page all
show :func:`job_history`; ``xirang pool jobs`` shows :func:`job_costs` beside each job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from xirang_service.cost.money import from_micro
from xirang_service.cost.store import CostStore
from xirang_service.pool.jobs import Job, priority_name
from xirang_service.pool.store import PoolStore

#: the states a job ends in: their events read "finished"
ENDS = ("done", "failed", "cancelled")


def job_costs(costs: CostStore | None, job_id: int | None = None) -> dict[int, dict[str, Any]]:
    """What metering charged each pool job so far (or job ``job_id``): amount and currency;
    a job never metered (no price book anywhere) has no entry."""
    if costs is None:
        return {}
    return {
        job: {"amount": float(from_micro(micro)), "currency": currency}
        for job, (micro, currency) in costs.pool_job_amounts(job_id).items()
    }


def priced(rows: Iterable[dict[str, Any]], costs: CostStore | None) -> list[dict[str, Any]]:
    """Jobs as the API shows them, each with its ``cost`` (None where not metered)."""
    rows = list(rows)
    one = rows[0]["id"] if len(rows) == 1 else None  # one job: read its charges only
    known = job_costs(costs, one) if rows else {}
    return [{**row, "cost": known.get(row["id"])} for row in rows]


def job_history(store: PoolStore, job_id: int, costs: CostStore | None) -> dict[str, Any] | None:
    """Job ``job_id``'s story, oldest first: each event with its time, its name (queued,
    placed, preempted, requeued, resumed, reprioritised, budget_stopped, finished), a
    sentence saying where and why, and its raw detail; then tokens and cost. None for a job
    the store does not hold."""
    found = store.jobs(ids=[job_id])
    if not found:
        return None
    job = found[0]
    rows = store.db.execute(
        "SELECT time, kind, detail FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
    )
    events = [(float(r["time"]), str(r["kind"]), json.loads(r["detail"])) for r in rows]
    nodes = _nodes(store) if any(kind == "started" for _, kind, _ in events) else {}
    return {
        "id": job.id,
        "name": job.name,
        "project": job.project,
        "state": job.state.value,
        "tokens": job.payload.get("tokens"),
        "cost": job_costs(costs, job_id).get(job_id),
        "events": _told(job, events, nodes),
    }


def waiting_event(now: float, reason: str) -> dict[str, Any]:
    """The last line of a queued job's story: why it has not started yet, as of ``now``."""
    return {"time": now, "event": "waiting", "text": f"waiting: {reason}", "detail": {}}


def _nodes(store: PoolStore) -> dict[int, str]:
    return {d["id"]: d["node"] for d in store.devices()}


def _told(
    job: Job, events: list[tuple[float, str, dict[str, Any]]], nodes: Mapping[int, str]
) -> list[dict[str, Any]]:
    """Each event named and told in a sentence; a placement after the first is a resume, and
    says how long the job waited for it."""
    told: list[dict[str, Any]] = []
    placed, waiting_since = False, job.submitted
    for at, kind, detail in events:
        name, text = _tell(job, kind, detail, nodes, placed)
        if kind == "started":
            text += f", after waiting {_duration(at - waiting_since)}"
            placed = True
        elif kind in ("preempted", "requeued"):
            waiting_since = at
        told.append({"time": at, "event": name, "text": text, "detail": detail})
    return told


def _tell(
    job: Job, kind: str, detail: dict[str, Any], nodes: Mapping[int, str], placed: bool
) -> tuple[str, str]:
    """(event name, sentence) for one stored event."""
    if kind == "submitted":
        return "queued", (
            f"queued: {job.cards} cards, priority {priority_name(job.priority)}, "
            f"class {job.job_class}"
        )
    if kind == "started":
        where = _where(detail, nodes)
        return ("resumed", f"resumed on {where}") if placed else ("placed", f"placed on {where}")
    if kind == "preempted":
        by = f" by job {detail['by']}" if detail.get("by") is not None else ""
        why = detail.get("reason") or "no reason recorded"
        return "preempted", f"preempted{by}: {why}; back in the queue, to resume"
    if kind == "requeued":
        return "requeued", f"requeued: {detail.get('reason', 'no reason recorded')}"
    if kind == "reprioritised":
        priority = detail.get("priority")
        shown = priority_name(priority) if isinstance(priority, int) else priority
        return "reprioritised", f"priority set to {shown}: {detail.get('reason', '')}"
    if kind == "straggler":
        return "straggler", (
            f"straggler reported: rank {detail.get('rank')} at {detail.get('speed_ratio')} of "
            f"its expected speed, on {detail.get('node', '?')}; {detail.get('action', '')}: "
            f"{detail.get('why', '')}"
        )
    if kind == "budget_stopped":
        return "budget_stopped", f"stopped by a budget: {detail.get('reason', '')}"
    if kind in ENDS:
        return "finished", f"finished: {kind}"
    return kind, kind


def _where(detail: Mapping[str, Any], nodes: Mapping[int, str]) -> str:
    devices = list(detail.get("devices") or [])
    hosts = sorted({nodes.get(d, "?") for d in devices})
    kind = detail.get("device_type", "")
    return f"{len(devices)} {kind} device(s) on {', '.join(hosts) or 'no node'}"


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
