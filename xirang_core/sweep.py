"""A Hydra callback that ends a ``-m`` sweep with a table of each job's final loss.

With a local launcher the jobs' ends reach this callback in-process; a remote launcher
(``hydra/launcher=submitit_slurm``) runs ``on_job_end`` in the job's own process, so the
driver reads each job's ``summary.json`` and overrides from the sweep folder instead.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepTable(Callback):
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        overrides = " ".join(job_return.overrides or [])
        if job_return.status == JobStatus.COMPLETED and isinstance(job_return.return_value, dict):
            summary = job_return.return_value
            self.rows.append(
                {
                    "job": len(self.rows),
                    "overrides": overrides,
                    "final_loss": summary["final_loss"],
                    "val_loss": summary["val_loss"],
                    "tokens_per_s": summary["tokens_per_s"],
                    "run_dir": summary["run_dir"],
                }
            )
        else:
            self.rows.append(
                {
                    "job": len(self.rows),
                    "overrides": overrides,
                    "final_loss": None,
                    "val_loss": None,
                    "tokens_per_s": None,
                    "run_dir": "failed",
                }
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not self.rows:
            self.rows = _rows_from_folder(Path(config.hydra.sweep.dir))
        if not self.rows:
            return
        ranked = sorted(self.rows, key=lambda r: (r["final_loss"] is None, r["final_loss"] or 0))
        out = Path(config.hydra.sweep.dir) / "sweep_results.csv"
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(ranked)
        _print_table(ranked, out)


#: below this width the run directories leave the table (the CSV keeps them)
WIDE = 120


def _print_table(ranked: list[dict[str, Any]], csv_path: Path) -> None:
    """Figures never truncate: overrides wrap, and on a narrow terminal the long run
    directories are left to the CSV, whose path is printed below the table."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    columns = [c for c in ranked[0] if c != "run_dir" or console.width >= WIDE]
    table = Table(title="sweep results (best first)", box=box.SIMPLE_HEAD, collapse_padding=True)
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column != "overrides")
    for row in ranked:
        table.add_row(*("-" if row[c] is None else str(row[c]) for c in columns))
    console.print(table)
    console.print(f"every job's figures and run directory:\n  {csv_path}", soft_wrap=True)


def _rows_from_folder(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per job folder of a sweep (``<n>/.hydra/overrides.yaml``), from its summary."""
    import json

    import yaml

    rows: list[dict[str, Any]] = []
    jobs = [d for d in sweep_dir.iterdir() if d.is_dir() and d.name.isdigit()]
    for folder in sorted(jobs, key=lambda d: int(d.name)):
        overrides_file = folder / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.exists() else []
        summary_file = folder / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        rows.append(
            {
                "job": int(folder.name),
                "overrides": " ".join(overrides or []),
                "final_loss": summary.get("final_loss"),
                "val_loss": summary.get("val_loss"),
                "tokens_per_s": summary.get("tokens_per_s"),
                "run_dir": summary.get("run_dir", "failed"),
            }
        )
    return rows
