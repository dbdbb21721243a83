"""A Hydra callback that ends a ``-m`` sweep with a table of each job's final loss."""

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
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title="sweep results (best first)")
        for column in self.rows[0]:
            table.add_column(column)
        ranked = sorted(self.rows, key=lambda r: (r["final_loss"] is None, r["final_loss"] or 0))
        for row in ranked:
            table.add_row(*("-" if v is None else str(v) for v in row.values()))
        Console().print(table)
        out = Path(config.hydra.sweep.dir) / "sweep_results.csv"
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            writer.writeheader()
            writer.writerows(ranked)
