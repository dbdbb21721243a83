"""One worker of tests/train/test_record_meet.py: a two-worker balanced DDP loop over the tiny
GPT, whose worker 1 holds its optimizer step until worker 0 has written that step's record."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from xirang.planning.smoke import SyntheticBatches
from xirang_core.data.shares import Shares
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext
from xirang_core.train.balance import Balancer
from xirang_core.train.loop import LoopSettings, Trainer
from xirang_core.train.optim import build_optimizer
from xirang_core.train.report import MetricsLog, read_metrics

#: how long worker 1's optimizer step waits for worker 0's record of the step
PATIENCE_S = 15.0


def run(rank: int, config: dict[str, Any], folder: str, steps: int) -> None:
    """Train ``steps`` steps (each logged); worker 1 writes, per step, whether worker 0's
    record of it was written while worker 1's optimizer step had not yet run."""
    torch.set_num_threads(1)
    init = f"file://{folder}/init"
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(0)
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    model = get_registry().load("model", "gpt").from_config(settings)
    optimizer = build_optimizer(model, config["optim"])
    run_dir = Path(folder)
    if rank == 1:
        optimizer.step = _held(optimizer.step, run_dir)  # type: ignore[method-assign]
    ctx = WorkerContext(rank, rank, 2, torch.device("cpu"), folder, config)
    balancer = Balancer("calibrated", 10, Shares((2, 1)), rank, ctx.device, folder)
    batches = SyntheticBatches(settings["vocab_size"], 16, 2, 0, rank, 2)
    fields = {"max_steps": steps, "accum_steps": 2, "micro_batch": 2, "seq_len": 16}
    fields |= {"log_every": 1, "grad_clip": 1.0, "optim": config["optim"]}
    fields |= {"flops_per_token": 0.0, "peak_flops": 0.0}
    metrics = MetricsLog(run_dir) if rank == 0 else None
    trainer = Trainer(
        DistributedDataParallel(model, broadcast_buffers=False),
        optimizer,
        batches,
        LoopSettings(**fields),
        ctx,
        get_registry().hook,
        metrics,
        balancer,
    )
    trainer.fit()
    dist.destroy_process_group()


def _held(step: Any, run_dir: Path) -> Any:
    """Worker 1's optimizer step: first wait (up to :data:`PATIENCE_S`) for worker 0's record
    of the step, and note whether it came."""
    done = [0]

    def held(*args: Any, **kwargs: Any) -> Any:
        done[0] += 1
        deadline = time.monotonic() + PATIENCE_S
        while not _logged(run_dir, done[0]) and time.monotonic() < deadline:
            time.sleep(0.02)
        with (run_dir / "held.jsonl").open("a") as out:
            out.write(json.dumps({"step": done[0], "record_first": _logged(run_dir, done[0])}))
            out.write("\n")
        return step(*args, **kwargs)

    return held


def _logged(run_dir: Path, step: int) -> bool:
    if not (run_dir / "metrics.jsonl").exists():
        return False
    return any(r["step"] == step for r in read_metrics(run_dir))
