"""The console's pages: overview, queue, nodes and cost, rendered for one viewer."""

from __future__ import annotations

import time
from typing import Any

from xirang_service.console.auth import OPERATOR
from xirang_service.console.charts import line_chart
from xirang_service.console.html import Raw, bar, page, pager, table
from xirang_service.console.source import ConsoleSource

PAGE_SIZE = 200
DAY = 86400.0


def display_name(who: str) -> str:
    return "operator" if who == OPERATOR else f"project {who}"


def overview(source: ConsoleSource, who: str, csrf: str = "") -> str:
    snap = source.snapshot()
    types = table(
        ["device type", "devices", "healthy", "allocated", "free", "water level"],
        [
            [
                r["device_type"],
                r["total"],
                r["healthy"],
                r["allocated"],
                r["free"],
                bar(r["water_level"]),
            ]
            for r in snap.capacity["types"]
        ],
        "capacity",
    )
    groups = table(
        ["device type", "interconnect group", "devices", "allocated", "free", "water level"],
        [
            [
                r["device_type"],
                r["group"],
                r["total"],
                r["allocated"],
                r["free"],
                bar(r["water_level"]),
            ]
            for r in snap.capacity["groups"]
        ],
        "groups",
    )
    drained = sum(1 for n in snap.nodes if not n["healthy"])
    body = (
        f"<h2>Capacity</h2>{types}<p>{drained} node(s) drained - see <a href=/nodes>Nodes</a>.</p>"
        f"<h2>Utilisation</h2>{_charts(source, snap.taken)}"
        f"<h2>Quota use</h2>{_quota_table(source.quotas_for(who))}"
        f"<details><summary>Interconnect groups ({len(snap.capacity['groups'])})</summary>"
        f"{groups}</details>"
    )
    return page("Pool overview", display_name(who), body, csrf)


def _charts(source: ConsoleSource, now: float) -> str:
    since = now - DAY
    water = source.metrics.series("water_level", since, now)
    queue = source.metrics.series("queue_length", since, now)
    return (
        '<div class="charts">'
        + line_chart("water level by device type (24 h)", water, since, now, y_max=1.0)
        + line_chart("queued jobs (24 h)", queue, since, now)
        + "</div>"
    )


def _quota_table(quotas: list[dict[str, Any]]) -> str:
    return table(
        ["project", "team", "guaranteed", "used in guarantee", "borrowed", "lent", "borrow limit"],
        [
            [
                q["project"],
                q["team"],
                q["guaranteed"],
                q["in_guarantee"],
                q["borrowed"],
                q["lent"],
                "none" if q["borrow_limit"] is None else q["borrow_limit"],
            ]
            for q in quotas
        ],
        "quotas",
    )


def jobs(source: ConsoleSource, who: str, page_no: int, csrf: str = "") -> str:
    rows = source.jobs_for(who)
    shown = rows[(page_no - 1) * PAGE_SIZE : page_no * PAGE_SIZE]
    body = table(
        ["#", "job", "name", "project", "state", "priority", "cards", "devices", "wait", "running"],
        [
            [
                j["position"] or "",
                Raw(f'<a href="/jobs/{int(j["id"])}">{int(j["id"])}</a>'),
                j["name"],
                j["project"],
                j["state"],
                j["priority"],
                j["cards"],
                f"{j['devices']} {j['device_type']}".strip(),
                _duration(j["wait_s"]),
                _duration(j["running_s"]),
            ]
            for j in shown
        ],
        "jobs",
    )
    queued = sum(1 for j in rows if j["state"] == "queued")
    head = f"<p>{queued:,} queued, {len(rows) - queued:,} running</p>"
    return page(
        "Queue and running jobs",
        display_name(who),
        head + body + pager("/jobs", page_no, len(rows), PAGE_SIZE),
        csrf,
    )


def job(history: dict[str, Any], who: str, csrf: str = "") -> str:
    """One job's page: its history (queued, placed, preempted by whom and why, requeued,
    resumed, finished), then its tokens and cost, as ``xirang pool history`` prints them."""
    events = table(
        ["time (UTC)", "event", "what happened"],
        [
            [time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["time"])), e["event"], e["text"]]
            for e in history["events"]
        ],
        "history",
    )
    tokens, cost = history["tokens"], history["cost"]
    facts = table(
        ["project", "state", "tokens", "cost"],
        [
            [
                history["project"],
                history["state"],
                "unknown" if tokens is None else tokens,
                f"{cost['amount']:.2f} {cost['currency']}" if cost else "not metered",
            ]
        ],
        "job",
    )
    title = f"Job {history['id']} {history['name']}".strip()
    return page(title, display_name(who), facts + events, csrf)


def nodes(source: ConsoleSource, who: str, page_no: int, csrf: str = "") -> str:
    if who != OPERATOR:
        only = "<p>Node health is shown to the operator.</p>"
        return page("Nodes", display_name(who), only, csrf)
    rows = source.snapshot().nodes
    shown = rows[(page_no - 1) * PAGE_SIZE : page_no * PAGE_SIZE]
    body = table(
        ["node", "device type", "group", "devices", "allocated", "health", "drain reason"],
        [
            [
                n["name"],
                n["device_type"],
                n["group"],
                n["devices"],
                n["allocated"],
                "healthy" if n["healthy"] else "drained",
                n["reason"],
            ]
            for n in shown
        ],
        "nodes",
    )
    more = pager("/nodes", page_no, len(rows), PAGE_SIZE) + _stragglers(source.stragglers())
    return page("Node health", display_name(who), body + more, csrf)


def _stragglers(rows: list[dict[str, Any]]) -> str:
    """Ranks of running jobs slower than calibrated even after rebalancing, if any."""
    if not rows:
        return ""
    head = "<h2>Stragglers in running jobs</h2>"
    return head + table(
        ["job", "name", "device type", "rank", "since step", "speed vs calibrated"],
        [
            [
                Raw(f'<a href="/jobs/{int(s["job"])}">{int(s["job"])}</a>'),
                s["name"],
                s["device_type"],
                s["rank"],
                s["step"],
                f"{s['speed_ratio']:.0%}",
            ]
            for s in rows
        ],
        "stragglers",
    )


def cost(source: ConsoleSource, who: str, csrf: str = "") -> str:
    data = source.cost_view(who)
    parts = []
    for by, title in (("team", "team"), ("project", "project"), ("device", "device type")):
        rep = data["by"][by]
        rows = [*rep["rows"], rep["total"]]
        parts.append(
            f"<h2>By {title} ({rep['currency']}, last 30 days)</h2>"
            + table(
                [title, "amount", "idle", "device-hours", "energy kWh", "tokens per cost"],
                [
                    [
                        r["key"],
                        r["amount"],
                        r["idle"],
                        r["device_hours"],
                        r["energy_kwh"],
                        "-" if r["tokens_per_cost"] is None else round(r["tokens_per_cost"]),
                    ]
                    for r in rows
                ],
                f"cost-{by}",
            )
        )
    budgets = table(
        ["scope", "name", "limit", "spent", "used", "state", "action at limit"],
        [
            [b["scope"], b["name"], b["limit"], b["spent"], bar(b["used"]), b["state"], b["action"]]
            for b in data["budgets"]
        ],
        "budgets",
    )
    found = table(
        ["finding", "job/run", "project", "team", "device", "cost", "detail"],
        [
            [f["kind"], f["ref"], f["project"], f["team"], f["device_type"], f["cost"], f["detail"]]
            for f in data["findings"]
        ],
        "findings",
    )
    now = source.snapshot().taken
    chart = (
        line_chart(
            "cost by team (24 h)",
            source.metrics.series("cost_total", now - DAY, now),
            now - DAY,
            now,
        )
        if who == OPERATOR
        else ""
    )
    if not data["findings"]:
        found = "<p>No low-utilisation holders or idle allocations.</p>"
    body = "".join(parts) + f"<h2>Budgets</h2>{budgets}<h2>Findings</h2>{found}{chart}"
    return page("Cost", display_name(who), body, csrf)


def _duration(seconds: float) -> str:
    if not seconds:
        return ""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
