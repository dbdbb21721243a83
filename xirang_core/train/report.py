"""What a run leaves behind: ``metrics.jsonl``, ``loss_curve.png``, ``summary.json``."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

from xirang_core.paths import replace_text

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
PLOT_FILE = "loss_curve.png"


class MetricsLog:
    """Append-only JSON lines, flushed per record so a crashed run keeps what it logged."""

    def __init__(self, run_dir: Path, segment: int = 0) -> None:
        self.path = run_dir / METRICS_FILE
        self.records: list[dict[str, Any]] = []
        self.segment = segment  # the run's segment these records belong to (0: not counted)

    def write(self, record: dict[str, Any]) -> None:
        if self.segment:
            record["segment"] = self.segment
        self.records.append(record)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def bits_per_byte(loss: float, bytes_per_token: float) -> float | None:
    """A loss in nats per token as bits per byte of text: comparable between runs whose
    tokenizers cut the same text into different tokens. None when the bytes are unknown."""
    return round(loss / math.log(2) / bytes_per_token, 5) if bytes_per_token else None


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


#: the curves of ``loss_curve.png``, by their legend
TRAIN_SERIES, EVAL_SERIES = "train loss", "eval loss (held-out data)"


def loss_series(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """The (step, loss) points ``loss_curve.png`` draws: the training loss of every record,
    and the evaluation loss where one was taken (``trainer.eval_every``, and the end), side
    by side so over-fitting or a held-out set unlike the training data shows."""
    return {
        TRAIN_SERIES: [(r["step"], r["loss"]) for r in records],
        EVAL_SERIES: [(r["step"], r["val_loss"]) for r in records if "val_loss" in r],
    }


def plot_loss(records: list[dict[str, Any]], path: Path, title: str) -> None:
    """Draw the loss curve to ``path``; without matplotlib (a lean GPU image), say so in one
    line and go on: the run trained and its figures are in metrics.jsonl and summary.json."""
    try:
        import matplotlib
    except ImportError:
        print(
            f"xirang: {path.name} not drawn: matplotlib is not installed (pip install matplotlib)",
            file=sys.stderr,
        )
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    series = loss_series(records)
    ax.plot(*zip(*series[TRAIN_SERIES], strict=True), label=TRAIN_SERIES, color="#1f77b4")
    resumed = [
        b["step"] for a, b in itertools.pairwise(records) if a.get("segment") != b.get("segment")
    ]
    for i, step in enumerate(resumed):  # where a resumed or restarted segment took over
        ax.axvline(step, color="#7f7f7f", ls="--", lw=0.8, label="resumed" if i == 0 else None)
    if series[EVAL_SERIES]:
        ax.plot(*zip(*series[EVAL_SERIES], strict=True), "o-", label=EVAL_SERIES, color="#d62728")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    replace_text(run_dir / SUMMARY_FILE, json.dumps(summary, indent=2))


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / SUMMARY_FILE).read_text())


def _validation(summary: dict[str, Any]) -> str:
    """Validation loss, with bits per byte when the run knows its text bytes per token."""
    text = f"{summary['val_loss']:.3f}"
    if summary.get("val_bpb") is not None:
        text += f" ({summary['val_bpb']:.3f} bits per byte, tokenizer {summary['tokenizer']})"
    return text


def _threads(summary: dict[str, Any]) -> str:
    """Threads per worker, the cores the run had and the host's load: a slow run on a busy
    host shows why."""
    return (
        f"{summary['threads']} per worker on {summary['cores']} cores; host load "
        f"{summary['host_load_start']:.2f} at the start, {summary['host_load_end']:.2f} at the end"
    )


def _model(summary: dict[str, Any]) -> str:
    """The model, its size and, when weights are frozen (LoRA), how many train of all."""
    text = f"{summary['model']} ({summary['params'] / 1e6:.2f}M parameters"
    if "trainable_params" in summary:
        trainable, total = summary["trainable_params"], summary["total_params"]
        text += f"; {trainable:,} of {total:,} trainable, {100 * trainable / total:.2f}%"
    return text + ")"


def _loss(summary: dict[str, Any]) -> str:
    """First and final training loss and how much lower (or higher: a diverged run) it is."""
    change = summary["loss_drop_pct"]
    way = f"{change:.0f}% lower" if change >= 0 else f"{-change:.0f}% higher: diverged"
    return f"{summary['first_loss']:.3f} → {summary['final_loss']:.3f} ({way})"


def divergence_hint(summary: dict[str, Any]) -> str | None:
    """What to change when the loss ended higher than it began (``optim.lr=10`` ended 8.362
    -> 52.323): the learning rate the run had and a tenth of it to try. None otherwise."""
    if summary["final_loss"] <= summary["first_loss"]:
        return None
    lr = summary.get("lr")
    at = f" at optim.lr={lr:g}" if lr else ""
    fix = f"optim.lr={lr / 10:g} (a tenth)" if lr else "a lower optim.lr"
    return (
        f"the loss ended higher than it began ({summary['first_loss']:.3f} → "
        f"{summary['final_loss']:.3f}): training diverged{at}; try {fix}, or a longer "
        f"warm-up (optim.warmup_steps)"
    )


def _mfu(summary: dict[str, Any]) -> str:
    """MFU, the peak it is a share of and where that peak came from (a datasheet, or a
    measurement and the host's load then): a peak measured busy reads low and MFU high."""
    text = (
        f"{summary['mfu'] * 100:.1f}% of {summary['peak_tflops']:.3f} TFLOP/s "
        f"({summary.get('precision', 'fp32')}); peak: {summary.get('peak_source', 'calibrated')}"
    )
    return text + (f"; {summary['mfu_note']}" if summary.get("mfu_note") else "")


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="run summary", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    cost = summary.get("cost") or {}
    rows = [
        ("run directory", summary["run_dir"]),
        ("model", _model(summary)),
        ("steps", str(summary["steps"])),
        ("tokens", f"{summary['tokens']:,}"),
        ("loss", _loss(summary)),
        ("validation loss", _validation(summary)),
        ("tokens/s", f"{summary['tokens_per_s']:,.0f}"),
        ("MFU", _mfu(summary)),
        (
            "wall time",
            f"{summary['wall_time_s']:.1f} s on {summary['world_size']} worker(s), "
            f"{summary['device']}",
        ),
    ]
    if "threads" in summary:
        rows.append(("threads", _threads(summary)))
    if summary.get("compile_s"):
        rows.append(
            (
                "compile",
                f"{summary['compile_s']:.1f} s in {summary['compile_steps']} step(s), "
                f"left out of tokens/s and MFU",
            )
        )
    if summary.get("restarts"):
        rows.append(
            (
                "restarts",
                f"{summary['restarts']}: figures cover all {summary['restarts'] + 1} segments",
            )
        )
    if summary.get("balance"):  # parallel.balance: micro-batches per rank at the end
        shares = ":".join(str(c) for c in summary["balance"]["shares"])
        rows.append(("balance", f"shares {shares}, efficiency {summary['balance']['efficiency']}"))
    if summary.get("pipeline"):  # a pipeline's stages over the last record's steps
        rows.append(("pipeline", pipeline_row(summary["pipeline"])))
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
    hint = divergence_hint(summary)
    if hint:
        console.print(f"warning: {hint}", markup=False, highlight=False)
    if summary.get("sample"):
        console.print("[bold]sample from the trained model:[/]")
        console.print(summary["sample"], markup=False, highlight=False)


def pipeline_row(pipeline: dict[str, Any]) -> str:
    """Each stage's layers and busy/idle milliseconds per step, and the bubble's share."""
    figures = zip(pipeline["stage_layers"], pipeline["busy_ms"], pipeline["idle_ms"], strict=True)
    stages = ", ".join(f"{n} layers {b:.1f}/{i:.1f} ms" for n, b, i in figures)
    return f"stages (busy/idle per step) {stages}; bubble {pipeline['bubble']:.1%}"
