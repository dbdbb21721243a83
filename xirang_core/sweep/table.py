"""A Hydra callback that ends a ``-m`` sweep with a table of its jobs, best first.

Each job's figures come from its ``summary.json`` in the sweep folder: a run returns only its
objective to the sweeper (a number, which ``hydra/sweeper=optuna`` needs), and a remote launcher
(``hydra/launcher=submitit_slurm``) runs the jobs in other processes anyway. Jobs rank by
``sweep.objective`` in ``sweep.direction``: finished ones first, then the trials a pruner
stopped (with the step they stopped at), then failed ones.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from xirang_core.terminal import fitting_table

#: the summary figures every row shows; the objective joins them when it is another one
FIGURES = ("final_loss", "val_loss", "tokens_per_s")


class SweepTable(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        objective, direction = config.sweep.objective, config.sweep.direction
        rows = rows_from_folder(sweep_dir, objective)
        if not rows:
            return
        ranked = sorted(rows, key=lambda r: _rank(r, objective, direction))
        out = sweep_dir / "sweep_results.csv"
        with out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(ranked)
        _print_table(ranked, out)


def _rank(row: dict[str, Any], objective: str, direction: str) -> tuple[int, float]:
    """Finished jobs, then pruned ones, then failed ones; each group by its objective."""
    value = row[objective]
    group = 2 if value is None or math.isnan(value) else int(row["pruned_at"] is not None)
    if group == 2:
        return group, 0.0
    return group, value if direction == "minimize" else -value


#: below this width the run directories leave the table (the CSV keeps them)
WIDE = 120


def _print_table(ranked: list[dict[str, Any]], csv_path: Path) -> None:
    """Figures never truncate nor split: overrides wrap between overrides, and on a narrow
    terminal the long run directories, then the last figures, are left to the CSV, whose
    path is printed below the table."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    columns = [c for c in ranked[0] if c != "run_dir" or console.width >= WIDE]

    def build(shown: list[str]) -> Table:
        table = Table(
            title="sweep results (best first)", box=box.SIMPLE_HEAD, collapse_padding=True
        )
        for column in shown:
            table.add_column(column, overflow="fold", no_wrap=column != "overrides")
        for row in ranked:
            table.add_row(*("-" if row[c] is None else str(row[c]) for c in shown))
        return table

    table, left_out = fitting_table(console, build, columns, keep=3)
    console.print(table)
    also = f" ({', '.join(left_out)} among them)" if left_out else ""
    console.print(f"every job's figures{also} and run directory:\n  {csv_path}", soft_wrap=True)


def rows_from_folder(sweep_dir: Path, objective: str = "val_loss") -> list[dict[str, Any]]:
    """One row per job folder of a sweep (``<n>/.hydra/overrides.yaml``), from its summary:
    its figures, the objective's, and ``pruned_at`` (the step a pruner stopped it at)."""
    import yaml

    figures = [*FIGURES, *([objective] if objective not in FIGURES else [])]
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
                **{figure: summary.get(figure) for figure in figures},
                "pruned_at": summary.get("pruned_at"),
                "run_dir": summary.get("run_dir", "failed"),
            }
        )
    return rows
