"""One worker of a multi-process checkpoint test (spawned by test_reshard.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tests.checkpoint.helpers import batch, build, manager


def run(rank: int, world: int, run_dir: str, stop: int, out: str, init_file: str) -> None:
    """Train (resuming when a checkpoint exists) to ``stop``; the main worker writes the global
    mean loss of every step it trained to ``out``."""
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
        )
    model, optim = build(dropout=0.0)
    wrapped = DistributedDataParallel(model) if world > 1 else model
    mgr = manager(run_dir, wrapped, optim, rank=rank, world=world)
    losses = {}
    for step in range(mgr.restore(), stop + 1):
        loss = wrapped(batch(step, rank=rank, world=world))
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses[step] = mean.item()
        mgr.on_step_end(step)
    mgr.finish(stop)
    if rank == 0:
        Path(out).write_text(json.dumps(losses))
    if world > 1:
        dist.destroy_process_group()
