"""Human-readable tables for the pool's answers and the simulator's comparisons."""

from __future__ import annotations

import re
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from xirang_core.terminal import fitting_table

#: job fields in the order a table shows them; a terminal under WIDE columns shows ``_NARROW``
_JOB_COLUMNS = (
    "position",
    "id",
    "project",
    "name",
    "cards",
    "job_class",
    "priority",
    "state",
    "device_type",
    "borrowed",
    "preemptions",
    "tokens",
    "cost",
)
_NARROW = ("position", "id", "project", "name", "cards", "priority", "state", "device_type", "cost")
WIDE = 120
#: the columns a narrow terminal leaves out first (use and quota stay in view)
_LESSER = ("run_as", "team", "max_priority", "max_jobs", "max_payload_bytes", "rate", "burst")
#: how the status' ``borrowed`` is counted, beside ``borrow_limit``: the two count apart
BORROWING = (
    "borrowed: the cards of jobs running beyond the guarantee of their project, each job counted "
    "whole (a 2-card job over a 1-card guarantee: borrowed 2); borrow_limit caps the cards in "
    "use beyond the guarantee (there 1)"
)
#: what a terminal acts on instead of showing: C0 and C1 controls, DEL, bidi overrides
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def print_answer(answer: dict[str, Any] | list[Any], console: Console | None = None) -> None:
    """A list of records as a table, the status as its lines and tables (never raw dicts)."""
    console = console or Console()
    if isinstance(answer, dict):
        _print_status(answer, console)
        return
    if not answer:
        console.print("(none)")
        return
    is_job = "id" in answer[0] and "cards" in answer[0]
    shown = _JOB_COLUMNS if console.width >= WIDE else _NARROW
    columns = [c for c in shown if c in answer[0]] if is_job else list(answer[0])

    def build(columns: list[str]) -> Table:
        table = Table()
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=column not in ("name", "project"))
        for row in answer:
            cells = {**row, "cost": _cost(row.get("cost"))} if is_job else row
            table.add_row(*(_cell(cells.get(c, "")) for c in columns))
        return table

    table, left_out = fitting_table(console, build, columns, leave_first=_LESSER)
    console.print(table)
    if is_job and len(columns) < len([c for c in _JOB_COLUMNS if c in answer[0]]):
        console.print(f"(class, borrowed, preemptions and tokens from {WIDE} columns, or --json)")
    elif left_out:
        console.print(f"({', '.join(left_out)}: on a wider terminal, or --json)")


def print_history(history: dict[str, Any], console: Console | None = None) -> None:
    """``xirang pool history JOB``: the job, then one line per event (local time, event,
    what happened and why), then its tokens and cost."""
    console = console or Console()
    head = f"job {history['id']} {history['name'] or ''} (project {history['project']})"
    console.print(Text.assemble((printable(head), "bold"), ": ", history["state"]))
    table = Table("time", "event", "what happened", show_edge=False)
    for event in history["events"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event["time"]))
        table.add_row(when, event["event"], _cell(event["text"]))
    console.print(table)
    tokens = history.get("tokens")
    console.print(
        Text.assemble(("tokens", "bold"), ": ", "unknown" if tokens is None else f"{tokens:,}")
    )
    console.print(
        Text.assemble(("cost", "bold"), ": ", _cost(history.get("cost")) or "not metered")
    )


def _cost(cost: dict[str, Any] | None) -> str:
    """A job's charge so far as ``12.34 USD``; empty where the pool does not meter it."""
    return f"{cost['amount']:.2f} {cost['currency']}" if cost else ""


def _print_status(status: dict[str, Any], console: Console) -> None:
    """Scalars as ``key: value`` lines; device types, projects and rows set aside as tables."""
    for key, value in status.items():
        if not isinstance(value, dict | list):
            console.print(Text.assemble((key, "bold"), ": ", _cell(value)))
    if "drained" in status:
        drained = ", ".join(status["drained"]) or "none"
        console.print(Text.assemble(("drained", "bold"), ": ", printable(drained)))
    if status.get("types"):
        types = [{"type": t, **v} for t, v in status["types"].items()]
        print_answer(types, console)
    if status.get("projects"):
        print_answer(status["projects"], console)
        if any(p.get("borrowed") for p in status["projects"]):
            console.print(BORROWING)
    if status.get("set_aside"):
        console.print("[bold]set aside[/]: stored rows a restart could not use (docs/pool.md)")
        print_answer(status["set_aside"], console)


def _cell(value: Any) -> Text:
    """A value as a reader expects it: none for a missing limit, yes/no for flags; as plain
    text (no rich markup) with its control characters escaped (:func:`printable`)."""
    if value is None:
        return Text("none")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    return Text(printable(str(value)))


def printable(text: str) -> str:
    """``text`` safe for a terminal: a tenant's job name holding ANSI escapes, a carriage
    return or a bidi override would clear, retitle or disguise the operator's screen, so each
    such character is shown as its escape (``\\x1b``, ``\\u202e``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _unmixed(row: dict[str, Any]) -> bool:
    return row.get("mixing", "off") == "off"


def comparison_table(
    rows: list[dict[str, Any]], baseline: str = "fifo", title: str = "pool policies on the trace"
) -> Table:
    """Policies side by side, with average JCT relative to the baseline policy without
    mixing, or, when that was not replayed, to the first policy replayed without mixing (so
    ``--policy priority --mixing off,balanced`` reads as mixing's gain)."""
    unmixed = [r for r in rows if _unmixed(r)]
    base = next((r for r in unmixed if r["policy"] == baseline), unmixed[0] if unmixed else None)
    baseline = base["policy"] if base else baseline
    table = Table(title=title)
    for column in (
        "policy",
        "avg JCT h",
        "p95 JCT h",
        "avg queue h",
        "util",
        "pre-\nempted",
        "frag",
        "JCT vs " + baseline,
    ):  # short headers fit 80 columns and no policy name is cut; the wall time went to stderr
        table.add_column(column, justify="right", no_wrap=column == "policy")
    for r in rows:
        ratio = f"{base['avg_jct_h'] / r['avg_jct_h']:.2f}x" if base and r["avg_jct_h"] else "-"
        table.add_row(
            r["policy"] if _unmixed(r) else f"{r['policy']} mix {r['mixing']}",
            f"{r['avg_jct_h']:.2f}",
            f"{r['p95_jct_h']:.2f}",
            f"{r['avg_queue_h']:.2f}",
            f"{r['utilisation']:.1%}",
            str(r["preemptions"]),
            f"{r['fragmentation']:.2f}",
            ratio,
        )
    return table
