"""Human-readable tables for the pool's answers and the simulator's comparisons."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

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
)


def print_answer(answer: dict[str, Any] | list[Any]) -> None:
    """A list of records as a table, a status mapping as key lines plus its project table."""
    console = Console()
    if isinstance(answer, dict):
        for key, value in answer.items():
            if key != "projects":
                console.print(f"[bold]{key}[/]: {value}")
        if answer.get("projects"):
            print_answer(answer["projects"])
        return
    if not answer:
        console.print("(none)")
        return
    is_job = "id" in answer[0] and "cards" in answer[0]
    columns = [c for c in _JOB_COLUMNS if c in answer[0]] if is_job else list(answer[0])
    table = Table()
    for column in columns:
        table.add_column(column)
    for row in answer:
        table.add_row(*(str(row.get(c, "")) for c in columns))
    console.print(table)


def comparison_table(rows: list[dict[str, Any]], baseline: str = "fifo") -> Table:
    """Policies side by side, with average JCT relative to the baseline policy."""
    base = next((r for r in rows if r["policy"] == baseline), None)
    table = Table(title="pool policies on the trace")
    for column in (
        "policy",
        "avg JCT h",
        "p95 JCT h",
        "avg queue h",
        "util",
        "preemptions",
        "fragmentation",
        "JCT vs " + baseline,
        "wall s",
    ):
        table.add_column(column, justify="right")
    for r in rows:
        ratio = base["avg_jct_h"] / r["avg_jct_h"] if base and r["avg_jct_h"] else float("nan")
        table.add_row(
            r["policy"],
            f"{r['avg_jct_h']:.2f}",
            f"{r['p95_jct_h']:.2f}",
            f"{r['avg_queue_h']:.2f}",
            f"{r['utilisation']:.1%}",
            str(r["preemptions"]),
            f"{r['fragmentation']:.2f}",
            f"{ratio:.2f}x",
            f"{r['wall_s']:.1f}",
        )
    return table
