"""A pruned Optuna sweep against the same sweep without pruning: trial-steps spent, best found.

Both sides are ``python -m xirang -m hydra/sweeper=optuna_pruning`` over the embedded run's
learning rate (log-uniform in [1e-4, 1e-1]) with the random sampler and one seed, so they draw
the same points whatever the trials return: one with successive halving (the default pruner),
one with ``hydra/sweeper/pruner=none``, which runs every point to the end and is thus the full
grid of those points. Trial-steps are the training steps all trials ran together.

Last line: ``pruned_trial_steps_ratio=<pruned sweep's trial-steps / unpruned sweep's>
best_loss_vs_grid=<best validation loss found with pruning / best of the grid>`` (goals: the
ratio at most 0.5, the loss at most 1.05).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from xirang_core.sweep.table import rows_from_folder


def sweep(runs: Path, pruner: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The sweep's jobs as the sweep table reads them, with each job's learning rate."""
    command = [
        sys.executable,
        "-m",
        "xirang",
        "-m",
        "hydra/sweeper=optuna_pruning",
        f"hydra/sweeper/pruner={pruner}",
        "hydra/sweeper/sampler=random",
        f"hydra.sweeper.n_trials={args.trials}",
        f"hydra.sweeper.sampler.seed={args.seed}",
        "optim.lr=tag(log, interval(1e-4, 1e-1))",
        f"model={args.model}",
        "tokenizer=bytes",
        f"data.seq_len={args.seq_len}",
        f"trainer.max_steps={args.steps}",
        f"trainer.eval_every={args.eval_every}",
        f"trainer.log_every={args.eval_every}",
        "trainer.sample_tokens=0",
        "optim.warmup_steps=2",
        "checkpoint=disabled",
    ]
    env = {**os.environ, "XIRANG_RUNS": str(runs)}
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    (folder,) = [p.parent for p in runs.rglob("sweep_results.csv")]
    rows = rows_from_folder(folder)
    for row in rows:
        row["lr"] = next(o for o in row["overrides"].split() if o.startswith("optim.lr="))
        row["steps"] = row["pruned_at"] or args.steps
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--steps", type=int, default=120, help="training steps per trial")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--model", default="gpt_tiny")
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        pruned = sweep(Path(scratch) / "pruned", "successive_halving", args)
        grid = sweep(Path(scratch) / "grid", "none", args)
    if sorted(r["lr"] for r in pruned) != sorted(r["lr"] for r in grid):
        raise SystemExit("the two sweeps drew different points; the comparison would not hold")
    for row in sorted(pruned, key=lambda r: r["job"]):
        (full,) = [g for g in grid if g["lr"] == row["lr"]]
        print(
            f"{row['lr']:<34} steps {row['steps']:>4}  val_loss {row['val_loss']:.4f}  "
            f"(full run {full['val_loss']:.4f})"
        )
    steps_ratio = sum(r["steps"] for r in pruned) / sum(r["steps"] for r in grid)
    best = min(r["val_loss"] for r in pruned if r["pruned_at"] is None)
    best_grid = min(r["val_loss"] for r in grid)
    print(f"{len([r for r in pruned if r['pruned_at']])} of {len(pruned)} trials pruned")
    print(f"pruned_trial_steps_ratio={steps_ratio:.3f} best_loss_vs_grid={best / best_grid:.4f}")


if __name__ == "__main__":
    main()
