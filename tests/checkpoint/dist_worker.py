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


def torchtitan_save(rank: int, world: int, folder: str, steps: int, init_file: str) -> None:
    """Train ``steps`` steps under FSDP2 over ``world`` ranks and save as torchtitan does: every
    rank writes its shards of the model (top level) and of the flattened optimizer state
    (``optimizer``) with DCP, plus ``train_state``; rank 0 also writes the full tensors beside
    the folder (``full.pt``), the reference the import must match."""
    from torch.distributed.checkpoint import save
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model, _ = build(dropout=0.0)
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(1, steps + 1):
        model(batch(step, rank=rank, world=world)).backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    flat = StateDictOptions(flatten_optimizer_state_dict=True)
    state = {
        **get_model_state_dict(model),
        "optimizer": get_optimizer_state_dict(model, optim, options=flat),
        "train_state": {"step": torch.tensor(steps)},
    }
    save(state, checkpoint_id=folder)
    full = StateDictOptions(
        full_state_dict=True, cpu_offload=True, flatten_optimizer_state_dict=True
    )
    whole = {
        "model": get_model_state_dict(model, options=full),
        "optimizer": get_optimizer_state_dict(model, optim, options=full),
    }
    if rank == 0:
        torch.save(whole, Path(folder).parent / "full.pt")
    dist.barrier()
    dist.destroy_process_group()
