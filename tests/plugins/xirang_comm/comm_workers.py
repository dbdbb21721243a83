"""Worker functions the comm tests run on 2-4 spawned gloo ranks (importable by the children)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

CONFIG = {"device": {"name": "cpu"}, "comm": {}}


def small_model(integer: bool) -> nn.Module:
    """Two bias-free layers; integer weights give integer gradients, exact in fp32."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 32, bias=False), nn.Linear(32, 16, bias=False))
    if integer:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randint(-3, 4, p.shape).float())
    return model


def batch(rank: int, step: int, integer: bool, vary: bool = True) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * rank + (step if vary else 0))
    if integer:
        return torch.randint(-2, 3, (4, 48), generator=gen).float()
    return torch.randn(4, 48, generator=gen)


def loss(model: nn.Module, x: torch.Tensor, integer: bool) -> torch.Tensor:
    """A sum keeps integer gradients integer; a square gives full-rank real gradients."""
    out = model(x)
    return out.sum() if integer else out.pow(2).mean()


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def true_mean(local: torch.Tensor, world: int) -> torch.Tensor:
    """The exact mean of every rank's gradient, summed in rank order."""
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    return sum(parts[1:], parts[0].clone()) / world


def compare_option(
    rank: int,
    world: int,
    name: str,
    settings: dict[str, Any],
    steps: int,
    integer: bool,
    vary: bool = True,
) -> dict[str, Any]:
    """Per step: the gradient DDP applied under comm=``name`` and the exact mean gradient."""
    model, reference = small_model(integer), small_model(integer)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 2048  # several buckets even for this small model
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.002)
    option = get_registry().create("comm", {"name": name, **settings})
    ctx = WorkerContext(rank, rank, world, torch.device("cpu"), "", CONFIG)
    option.install_hooks(ddp, ctx)
    applied, exact = [], []
    for step in range(steps):
        x = batch(rank, step, integer, vary)
        loss(ddp, x, integer).backward()
        loss(reference, x, integer).backward()
        applied.append(flat_grads(model).clone())
        exact.append(true_mean(flat_grads(reference), world))
        model.zero_grad(), reference.zero_grad()
    return {"applied": applied, "exact": exact, "report": option.report(steps)}


def compare_options(
    rank: int,
    world: int,
    options: list[tuple[str, dict[str, Any]]],
    steps: int,
    integer: bool,
    vary: bool = True,
) -> dict[str, dict[str, Any]]:
    """:func:`compare_option` for several options in one process group (spawning is slow)."""
    return {
        name: compare_option(rank, world, name, settings, steps, integer, vary)
        for name, settings in options
    }


def periodic_params(rank: int, world: int, name: str, settings: dict[str, Any], steps: int):
    """Parameters on each rank after ``steps`` SGD steps under a periodic-sync option."""
    model = small_model(False)
    ddp = DistributedDataParallel(model)
    option = get_registry().create("comm", {"name": name, **settings})
    option.install_hooks(ddp, WorkerContext(rank, rank, world, torch.device("cpu"), "", CONFIG))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    history = []
    for step in range(steps):
        ddp(batch(rank, step, False)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        history.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone())
    option.step_hook.remove()
    return {"history": history, "report": option.report(steps)}


def periodic_many(rank: int, world: int, options: list[tuple[str, dict[str, Any]]], steps: int):
    """:func:`periodic_params` for several options in one process group."""
    return {name: periodic_params(rank, world, name, settings, steps) for name, settings in options}


def train_many(rank: int, world: int, runs: list[Any]) -> list[dict[str, Any]]:
    """Several tiny-GPT trainings (``scaling.TrainSettings``) in one process group."""
    from xirang_comm.scaling import train

    return [train(rank, world, run) for run in runs]


def shared_batches(step: int, shares: list[int], integer: bool) -> list[torch.Tensor]:
    """A step's micro-batches, the same on every rank whoever runs them (``M = sum(shares)``)."""
    return [batch(100 + m, step, integer) for m in range(sum(shares))]


def balanced_grads(
    ddp: nn.Module, model: nn.Module, rank: int, world: int, step: int, shares: list[int], integer
):
    """Rank ``rank`` runs its ``shares[rank]`` micro-batches of the step, each loss scaled by
    ``W / M`` as ``parallel.balance`` scales it (``xirang_core/train/balance.py``), the sync on
    the last; returns the gradient applied after the exchange."""
    micro = shared_batches(step, shares, integer)
    start = sum(shares[:rank])
    mine = micro[start : start + shares[rank]]
    scale = world / len(micro)
    for i, x in enumerate(mine):
        if i < len(mine) - 1:
            with ddp.no_sync():
                (loss(ddp, x, integer) * scale).backward()
        else:
            (loss(ddp, x, integer) * scale).backward()
    grads = flat_grads(model).clone()
    model.zero_grad()
    return grads


def mixed_against_plain(
    rank: int, world: int, types: list[str], shares: list[int], steps: int, integer: bool
) -> dict[str, Any]:
    """Per step, the gradient under comm=mixed (ranks labelled ``types`` through their
    resolved ``runtime.device_type``; every level gloo on this test bed) and under the plain
    all-reduce (comm=gloo), both with the token shares ``shares``, and the exact token-weighted
    mean computed from every micro-batch on one model."""
    config = {**CONFIG, "runtime": {"device_type": types[rank]}}
    ctx = WorkerContext(rank, rank, world, torch.device("cpu"), "", config)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 2048  # several buckets even for this small model
    runs = {}
    for name, settings in (("gloo", {}), ("mixed", {"backend": "gloo"})):
        model = small_model(integer)
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.002)
        option = get_registry().create("comm", {"name": name, **settings})
        option.install_hooks(ddp, ctx)
        applied = [
            balanced_grads(ddp, model, rank, world, s, shares, integer) for s in range(steps)
        ]
        runs[name] = {"applied": applied, "report": option.report(steps)}
    reference, exact = small_model(integer), []
    for step in range(steps):
        micro = shared_batches(step, shares, integer)
        sum(loss(reference, x, integer) for x in micro).div(len(micro)).backward()
        exact.append(flat_grads(reference).clone())
        reference.zero_grad()
    return {**runs, "exact": exact}


def mixed_refusals(rank: int, world: int, types: list[str]) -> list[str]:
    """What comm=mixed says on this rank when the ranks' types are ``types`` (one unknown),
    then under a DDP that replicates over a sub-group (each rank alone)."""
    from xirang import ConfigError

    config = {**CONFIG, "runtime": {"device_type": types[rank]}}
    ctx = WorkerContext(rank, rank, world, torch.device("cpu"), "", config)
    alone = [dist.new_group([r]) for r in range(world)][rank]
    said = []
    for group in (None, alone):
        option = get_registry().create("comm", {"name": "mixed", "backend": "gloo"})
        ddp = DistributedDataParallel(small_model(True), process_group=group)
        try:
            option.install_hooks(ddp, ctx)
            said.append("installed")
        except ConfigError as exc:
            said.append(str(exc))
    return said
