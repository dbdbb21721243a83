"""Worker functions for test_torch_hooks.py (importable by the spawned gloo ranks): one model
under a xirang ``comm=`` option, its twin under torch's own hook or optimizer, same batches."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.optim import PostLocalSGDOptimizer
from torch.nn.parallel import DistributedDataParallel

from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

CONFIG = {"device": {"name": "cpu"}, "comm": {}}


def model() -> nn.Module:
    """Two bias-free layers (32x48 and 16x32): 2048 parameters, one DDP bucket."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(48, 32, bias=False), nn.Linear(32, 16, bias=False))


def batch(rank: int, step: int) -> torch.Tensor:
    return torch.randn(4, 48, generator=torch.Generator().manual_seed(1000 * rank + step))


def torch_reference(name: str, settings: dict[str, Any]) -> tuple[Any, Any]:
    """(state, hook) as a torch user registers them for what ``comm=name`` promises."""
    if name == "powersgd":
        state = PowerSGDState(
            None,
            matrix_approximation_rank=settings["rank"],
            start_powerSGD_iter=settings["start_iter"],
            min_compression_rate=1,
        )
        return state, powerSGD_hook
    hooks = {
        "gloo": default_hooks.allreduce_hook,
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": bf16_on_cpu,
    }
    return None, hooks[name]


def bf16_on_cpu(state, bucket):  # type: ignore[no-untyped-def]
    """torch's bf16 hook; DDP refuses to register it by name off CUDA/NCCL, not to run it."""
    return default_hooks.bf16_compress_hook(state, bucket)


def xirang_ddp(rank: int, world: int, name: str, settings: dict[str, Any]) -> tuple[Any, Any]:
    """A DDP model with xirang's ``comm=name`` installed, and the option."""
    ddp = DistributedDataParallel(model())
    option = get_registry().create("comm", {"name": name, **settings})
    option.install_hooks(ddp, WorkerContext(rank, rank, world, torch.device("cpu"), "", CONFIG))
    return ddp, option


def gradients(rank: int, world: int, name: str, settings: dict[str, Any], steps: int) -> dict:
    """Each step's gradients under xirang's option and under torch's hook, and the report."""
    ours, option = xirang_ddp(rank, world, name, settings)
    theirs = DistributedDataParallel(model())
    theirs.register_comm_hook(*torch_reference(name, settings))
    pairs = []
    for step in range(steps):
        for ddp in (ours, theirs):
            ddp(batch(rank, step)).pow(2).mean().backward()
        pairs.append(
            [torch.cat([p.grad.reshape(-1) for p in m.parameters()]) for m in (ours, theirs)]
        )
        ours.zero_grad(), theirs.zero_grad()
    return {"pairs": pairs, "report": option.report(steps)}


def local_sgd(rank: int, world: int, every: int, steps: int) -> dict:
    """Parameters per step under comm=localsgd and under torch's PostLocalSGDOptimizer."""
    ours, option = xirang_ddp(rank, world, "localsgd", {"every": every})
    theirs = DistributedDataParallel(model())
    theirs.register_comm_hook(PostLocalSGDState(None, None, 0, False), post_localSGD_hook)
    ours_opt = torch.optim.SGD(ours.parameters(), lr=0.05)
    averager = PeriodicModelAverager(period=every, warmup_steps=every - 1)
    theirs_opt = PostLocalSGDOptimizer(torch.optim.SGD(theirs.parameters(), lr=0.05), averager)
    pairs = []
    for step in range(steps):
        for ddp, opt in ((ours, ours_opt), (theirs, theirs_opt)):
            ddp(batch(rank, step)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        pairs.append(
            [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in (ours, theirs)]
        )
    option.step_hook.remove()
    return {"pairs": pairs, "report": option.report(steps)}


def all_options(rank: int, world: int, runs: list[tuple[str, dict[str, Any]]], steps: int) -> dict:
    """:func:`gradients` for each option, then :func:`local_sgd`, in one process group."""
    out = {name: gradients(rank, world, name, settings, steps) for name, settings in runs}
    out["localsgd"] = local_sgd(rank, world, 4, steps)
    return out
