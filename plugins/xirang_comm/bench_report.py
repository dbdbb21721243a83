"""Tables and the plot that ``xirang bench comm`` leaves in its run directory."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

TABLES = {
    "collectives": ("op", "world", "bytes", "seconds", "bus_gbps", "of_stated"),
    "scaling": (
        "option",
        "world",
        "tokens_per_s",
        "efficiency",
        "wire_bytes_per_step",
        "hidden_frac",
        "bottleneck",
        "final_loss",
    ),
    "predictions": ("op", "world", "bytes", "seconds", "bottleneck"),
}
PLOT_FILE = "bench_comm.png"
#: what a terminal table calls a column (the CSV files and report.md keep the full names)
HEADERS = {
    "world": "p",
    "tokens_per_s": "tok/s",
    "efficiency": "eff",
    "wire_bytes_per_step": "wire B/step",
    "hidden_frac": "hidden",
    "final_loss": "loss",
    "of_stated": "of stated",
    "bus_gbps": "bus GB/s",
    "bottleneck": "bound by",
}


def write(results: dict[str, Any], folder: Path) -> Path:
    """``<table>.csv`` for each table, ``report.md``, ``results.json`` and the PNG plot."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, columns in TABLES.items():
        with (folder / f"{name}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(results[name])
    (folder / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (folder / "report.md").write_text(markdown(results))
    plot(results, folder / PLOT_FILE)
    return folder


def markdown(results: dict[str, Any]) -> str:
    parts = [
        "# xirang bench comm",
        f"Stated link bandwidth: {results['stated_bandwidth_bps'] / 1e9:.2f} GB/s. "
        f"Bottleneck: {results['bottleneck']}. Cluster for predictions: {results['cluster']}.",
    ]
    for name, columns in TABLES.items():
        parts.append(f"## {name}\n\n| {' | '.join(columns)} |\n|{'---|' * len(columns)}")
        parts.extend(
            "| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in results[name]
        )
    return "\n\n".join(parts[:2]) + "\n\n" + "\n".join(parts[2:]) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """Bus bandwidth against message size per collective and worker count; scaling efficiency
    against workers per option."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bw_ax, eff_ax) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    rows = results["collectives"]
    for op, world in sorted({(r["op"], r["world"]) for r in rows}):
        line = [r for r in rows if r["op"] == op and r["world"] == world]
        bw_ax.plot(
            [r["bytes"] for r in line], [r["bus_gbps"] for r in line], "o-", label=f"{op} p={world}"
        )
    bw_ax.axhline(results["stated_bandwidth_bps"] / 1e9, color="gray", ls="--", label="stated")
    bw_ax.set(
        xscale="log",
        yscale="log",
        xlabel="message bytes",
        ylabel="bus bandwidth GB/s",
        title="collectives",
    )
    bw_ax.legend(fontsize=7)
    scaling = results["scaling"]
    for option in sorted({r["option"] for r in scaling if r["option"] != "single"}):
        line = [r for r in scaling if r["option"] in (option, "single")]
        eff_ax.plot([r["world"] for r in line], [r["efficiency"] for r in line], "o-", label=option)
    eff_ax.set(xlabel="workers", ylabel="scaling efficiency", title="scaling", ylim=(0, 1.1))
    eff_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def show(results: dict[str, Any], folder: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, columns in TABLES.items():
        table = Table(title=name)
        for column in columns:  # short headers, figures whole: every table fits 80 columns
            wraps = column == "bottleneck"  # the one text column: folds, never cut
            table.add_column(
                HEADERS.get(column, column),
                no_wrap=not wraps,
                overflow="fold" if wraps else "ellipsis",
            )
        for row in results[name][:40]:
            table.add_row(*(_cell(row.get(c)) for c in columns))
        console.print(table)
    console.print(f"bottleneck: {results['bottleneck']}")
    console.print(f"written to {folder} (report.md, *.csv, results.json, {PLOT_FILE})")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)
