"""Two unequal workers in one data-parallel job: the uniform split against ``parallel.balance``.

One worker has a full core, the other runs under a CPU quota (``scheduler.worker_quota``, the
cgroup v1 CPU controller, as Kubernetes CPU limits are: a slower device made real, nothing
sleeps). Same model, global batch and steps for every run, alternating round by round:

- (a) uniform: DDP splits each step's micro-batches evenly, as DDP, FSDP and torchtitan do;
- (b) balanced: ``parallel.balance=adaptive``, started from even shares so that the move to
  the measured speeds is itself measured (``straggler_rebalance_steps``: the first step that
  runs the shares the run ends with);
- each worker alone (one process under its quota) for its solo tokens/s.

Last line: ``hetero_efficiency=<balanced tok/s over the sum of the solo tok/s>
speedup_vs_uniform=<balanced over uniform tok/s> straggler_rebalance_steps=<n>
loss_diff=<max |balanced - uniform| loss over the logged steps>``. Needs root (the cgroups).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def train(folder: Path, name: str, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One run of ``python -m xirang``; its summary and logged losses and shares per step."""
    run_dir = folder / name
    command = [
        sys.executable,
        "-m",
        "xirang",
        f"model={args.model}",
        "tokenizer=bytes",
        f"data.seq_len={args.seq_len}",
        f"trainer.global_batch={args.global_batch}",
        "trainer.micro_batch=1",
        f"trainer.max_steps={args.steps}",
        "trainer.log_every=1",
        "trainer.sample_tokens=0",
        "trainer.threads=1",
        "checkpoint.interval=0",
        f"hydra.run.dir={run_dir}",
        *args.override,
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    print(f"{name}: {summary['tokens_per_s']:.1f} tok/s", flush=True)
    return {"tokens_per_s": summary["tokens_per_s"], "records": records}


def runs(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every configuration once per round, in turn (drift in the machine's load hits all)."""
    quotas = f"[1.0,{args.quota}]"
    half = args.global_batch // 2
    configs = {
        "uniform": ["parallel=ddp", "trainer.nproc=2", f"scheduler.worker_quota={quotas}"],
        "balanced": [
            "parallel=ddp",
            "trainer.nproc=2",
            f"scheduler.worker_quota={quotas}",
            "parallel.balance=adaptive",
            f"parallel.balance_every={args.every}",
            f"parallel.balance_shares=[{half},{half}]",
        ],
        "solo_fast": ["scheduler.worker_quota=[1.0]"],
        "solo_slow": [f"scheduler.worker_quota=[{args.quota}]"],
    }
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory(prefix="xirang-hetero-") as tmp:
        for round_ in range(args.rounds):
            for name, extra in configs.items():
                found[name].append(train(Path(tmp), f"{name}-{round_}", args, extra))
    return found


def rebalance_steps(records: list[dict[str, Any]]) -> int:
    """The first step that runs the shares the balanced run ends with."""
    final = records[-1]["balance_shares"]
    return next(r["step"] for r in records if r["balance_shares"] == final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama_small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=2, help="parallel.balance_every")
    parser.add_argument("--quota", type=float, default=0.4, help="the slow worker's CPUs")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--override", nargs="*", default=[], help="more overrides, each run")
    args = parser.parse_args()
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")  # waiting threads sleep (tests/conftest.py)
    found = runs(args)
    speed = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in found.items()}
    balanced, uniform = found["balanced"][-1]["records"], found["uniform"][-1]["records"]
    loss_diff = max(abs(b["loss"] - u["loss"]) for b, u in zip(balanced, uniform, strict=True))
    print(
        f"final shares {balanced[-1]['balance_shares']}, solo tok/s {speed['solo_fast']:.1f}"
        f" + {speed['solo_slow']:.1f}, uniform {speed['uniform']:.1f}"
    )
    print(
        f"hetero_efficiency={speed['balanced'] / (speed['solo_fast'] + speed['solo_slow']):.3f} "
        f"speedup_vs_uniform={speed['balanced'] / speed['uniform']:.3f} "
        f"straggler_rebalance_steps={rebalance_steps(balanced)} loss_diff={loss_diff:.2e}"
    )


if __name__ == "__main__":
    main()
