"""What a run leaves behind: ``metrics.jsonl``, ``loss_curve.png``, ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "loss_curve.png"


class MetricsLog:
    """Append-only JSON lines, flushed per record so a crashed run keeps what it logged."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS_FILE
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_loss(records: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps = [r["step"] for r in records]
    ax.plot(steps, [r["loss"] for r in records], label="train loss", color="#1f77b4")
    if any("val_loss" in r for r in records):
        val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
        ax.plot(*zip(*val, strict=True), "o", label="validation loss", color="#d62728")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    tmp = run_dir / f".{SUMMARY_FILE}.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    tmp.replace(run_dir / SUMMARY_FILE)


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / SUMMARY_FILE).read_text())


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="run summary", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    cost = summary.get("cost") or {}
    rows = [
        ("run directory", summary["run_dir"]),
        ("model", f"{summary['model']} ({summary['params'] / 1e6:.2f}M parameters)"),
        ("steps", str(summary["steps"])),
        ("tokens", f"{summary['tokens']:,}"),
        (
            "loss",
            f"{summary['first_loss']:.3f} → {summary['final_loss']:.3f} "
            f"({summary['loss_drop_pct']:.0f}% lower)",
        ),
        ("validation loss", f"{summary['val_loss']:.3f}"),
        ("tokens/s", f"{summary['tokens_per_s']:,.0f}"),
        (
            "MFU",
            f"{summary['mfu'] * 100:.1f}% of {summary['peak_tflops']:.3f} TFLOP/s calibrated"
            f" ({summary.get('precision', 'fp32')})",
        ),
        (
            "wall time",
            f"{summary['wall_time_s']:.1f} s on {summary['world_size']} worker(s), "
            f"{summary['device']}",
        ),
    ]
    if summary.get("compile_s"):
        rows.append(
            (
                "compile",
                f"{summary['compile_s']:.1f} s in {summary['compile_steps']} step(s), "
                f"left out of tokens/s and MFU",
            )
        )
    if summary.get("skipped_steps"):
        rows.append(("skipped steps", f"{summary['skipped_steps']} (non-finite, not applied)"))
    if cost:
        rows.append(
            (
                "cost",
                f"{cost['amount']:.6f} {cost['currency']} "
                f"({summary['tokens_per_cost']:,.0f} tokens per {cost['currency']})",
            )
        )
    for key, value in rows:
        table.add_row(key, value)
    console = Console()
    console.print(table)
    if summary.get("sample"):
        console.print("[bold]sample from the trained model:[/]")
        console.print(summary["sample"], markup=False, highlight=False)
