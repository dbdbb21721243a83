"""What the console shows, from one read of the pool's store, as JSON-ready dicts.

Capacity and water level per device type and interconnect group, node health with drain
reasons, the queue and running jobs, and quota use. Each function is one pass over the state,
so a pool of 10,000 devices and 1,000 jobs costs milliseconds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from xirang_core.checkpoint.events import read_events
from xirang_service.console.state import PoolState
from xirang_service.cost.money import split_exact
from xirang_service.pool.jobs import Job, JobState, priority_name


def capacity(state: PoolState) -> dict[str, list[dict[str, Any]]]:
    """Devices per device type and per interconnect group (leaf switch): total, healthy,
    allocated, free and the water level (allocated share of healthy devices)."""
    by_type: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_group: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for node in state.nodes:
        size, used, healthy = node["devices"], node["used"], bool(node["healthy"])
        for bucket in (by_type[node["type"]], by_group[(node["type"], node["leaf"])]):
            bucket["total"] += size
            bucket["allocated"] += used
            bucket["healthy"] += size if healthy else 0
            bucket["free"] += size - used if healthy else 0
    types = [_level({"device_type": t, **by_type[t]}) for t in sorted(by_type)]
    groups = [
        _level({"device_type": t, "group": leaf, **by_group[(t, leaf)]})
        for t, leaf in sorted(by_group)
    ]
    return {"types": types, "groups": groups}


def _level(row: dict[str, Any]) -> dict[str, Any]:
    row["water_level"] = round(row["allocated"] / row["healthy"], 4) if row["healthy"] else 0.0
    return row


def nodes(state: PoolState) -> list[dict[str, Any]]:
    """Every node with its use and health; drained nodes first, each with its reason."""
    rows = [
        {
            "name": n["name"],
            "device_type": n["type"],
            "devices": n["devices"],
            "allocated": n["used"],
            "group": n["leaf"],
            "healthy": bool(n["healthy"]),
            "reason": "" if n["healthy"] else (n.get("drain_reason") or "drained"),
        }
        for n in state.nodes
    ]
    return sorted(rows, key=lambda r: (r["healthy"], r["name"]))


def stragglers(state: PoolState) -> list[dict[str, Any]]:
    """Ranks that running jobs' balancers reported as stragglers (``straggler`` events in the
    run directory a job names): still far slower than calibrated after rebalancing, so their
    device is throttled, shared or failing. One small file read per such job."""
    rows = []
    for job in state.live_jobs():
        run_dir = job.payload.get("run_dir")
        if job.state is not JobState.RUNNING or not run_dir:
            continue
        try:
            events = read_events(run_dir)
        except (OSError, ValueError):  # unreadable here, or a line being written
            continue
        rows += [
            {"job": job.id, "name": job.name or f"job-{job.id}", "device_type": job.device_type}
            | {k: e[k] for k in ("rank", "step", "speed_ratio")}
            for e in events
            if e["event"] == "straggler"
        ]
    return rows


def jobs(state: PoolState, now: float) -> list[dict[str, Any]]:
    """Queued jobs, highest priority and longest waiting first, then running jobs."""
    live = state.live_jobs()
    queued = sorted(
        (j for j in live if j.state is JobState.QUEUED), key=lambda j: (-j.priority, j.submitted)
    )
    running = [j for j in live if j.state is JobState.RUNNING]
    rows = [_job(j, now, position=i + 1) for i, j in enumerate(queued)]
    return rows + [_job(j, now) for j in running]


def _job(job: Job, now: float, position: int | None = None) -> dict[str, Any]:
    waiting = job.state is JobState.QUEUED
    return {
        "id": job.id,
        "name": job.name or f"job-{job.id}",
        "project": job.project,
        "state": job.state.value,
        "priority": priority_name(job.priority),
        "cards": job.cards,
        "device_type": job.device_type,
        "devices": len(job.devices),
        "borrowed": job.borrowed,
        "position": position,
        "wait_s": round(max(0.0, now - job.submitted), 1) if waiting else 0.0,
        "running_s": round(now - job.started, 1) if job.started is not None else 0.0,
    }


def quotas(state: PoolState) -> list[dict[str, Any]]:
    """Per project: guaranteed cards, cards used inside it, borrowed beyond it, and lent.

    *Lent* is guaranteed capacity a project leaves idle that other projects are borrowing; the
    pool's total borrowing is attributed to the idle guarantees in proportion (exactly, in whole
    cards), since borrowed cards are not tagged with whose guarantee they came from.
    """
    used: dict[str, int] = defaultdict(int)
    borrowed: dict[str, int] = defaultdict(int)
    for job in state.live_jobs():
        if job.state is JobState.RUNNING:
            used[job.project] += job.cards
            borrowed[job.project] += job.cards if job.borrowed else 0
    inside = {p.name: used[p.name] - borrowed[p.name] for p in state.projects}
    idle = {p.name: max(0, p.guaranteed - inside[p.name]) for p in state.projects}
    lendable = min(sum(borrowed.values()), sum(idle.values()))
    lent = split_exact(lendable, idle) if lendable else {}
    return [
        {
            "project": p.name,
            "team": p.team,
            "guaranteed": p.guaranteed,
            "borrow_limit": p.borrow_limit,
            "in_guarantee": inside[p.name],
            "borrowed": borrowed[p.name],
            "lent": lent.get(p.name, 0),
        }
        for p in state.projects
    ]
