"""The scaling-benchmark procedure, as worker functions for :func:`launch.run_group`.

1. Collective timings: all-reduce, reduce-scatter and all-gather at each message size on p
   ranks; the median of several repetitions after a warm-up.
2. Training throughput: a tiny GPT under DDP with one comm option on p ranks; one rank without
   DDP is the baseline, and scaling efficiency is tokens/s(p) / (p * tokens/s(1)). Each run also
   returns the option's counted bytes per step, its hidden communication and its final loss.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from xirang import ConfigError, get_registry
from xirang.comm import OPS, Collectives, OverlapMeter, WireLedger
from xirang.specs import RunConfig, WorkerContext
from xirang_comm.base import GradientSync

#: a GPT small enough that a 2-core machine trains it in seconds, big enough to have matrices
TINY_GPT = {"n_layer": 2, "n_head": 2, "n_embd": 64, "max_seq_len": 64, "vocab_size": 256}


@dataclass
class TrainSettings:
    """One throughput or convergence run: the comm option and the training shape."""

    option: str = "gloo"
    option_settings: dict[str, Any] = field(default_factory=dict)
    steps: int = 30
    warmup_steps: int = 5
    micro_batch: int = 8
    seq_len: int = 64
    lr: float = 3e-3
    bucket_mb: float = 0.25
    model: dict[str, Any] = field(default_factory=lambda: dict(TINY_GPT))
    seed: int = 0


def time_collectives(rank: int, world: int, sizes: list[int], reps: int) -> list[dict[str, Any]]:
    """Median seconds of each collective at each size (bytes of fp32 input) on this group."""
    ledger = WireLedger()
    comm = Collectives(ledger)
    rows = []
    for op in OPS:
        for size in sizes:
            numel = max(world, size // 4 // world * world)  # reduce-scatter needs p | numel
            tensor = torch.ones(numel)
            times = []
            for rep in range(reps + 1):
                dist.barrier()
                started = comm.clock.stamp()  # device events on NCCL: its wait() is enqueue
                getattr(comm, op)(tensor).wait()
                if rep:  # the first is a warm-up
                    times.append(comm.clock.seconds(started, comm.clock.stamp()))
            rows.append(
                {"op": op, "bytes": numel * 4, "world": world, "seconds": statistics.median(times)}
            )
    return rows


def corpus() -> torch.Tensor:
    """Bytes of a few standard-library modules: real text, identical on every machine with the
    same Python."""
    folder = Path(os.__file__).parent
    names = ("argparse.py", "dataclasses.py", "textwrap.py", "shlex.py", "fractions.py")
    data = b"".join((folder / n).read_bytes() for n in names if (folder / n).exists())
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def train(rank: int, world: int, s: TrainSettings) -> dict[str, Any]:
    """Train the tiny GPT for ``s.steps`` steps under ``s.option``; rank 0's figures."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(s.seed)
    model = get_registry().load("model", "gpt").from_config(dict(s.model))
    assert isinstance(model, nn.Module)  # a model family builds a torch module
    wrapped: nn.Module = model
    option: GradientSync | None = None
    if world > 1:
        wrapped = DistributedDataParallel(model, bucket_cap_mb=s.bucket_mb)
        option = counted_option(s)
        config = RunConfig({"device": {"name": "cpu"}, "comm": {"name": s.option}})
        option.install_hooks(wrapped, WorkerContext(rank, rank, world, "cpu", "", config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    tokens = corpus()
    gen = torch.Generator().manual_seed(s.seed * 1000 + rank)
    losses, started, bytes_before = [], time.perf_counter(), 0.0
    for step in range(s.steps):
        if step == s.warmup_steps:
            started = time.perf_counter()
            bytes_before = option.ledger.wire_bytes() if option is not None else 0.0
            if option is not None:  # overlap over the timed steps too (not DDP's first pass,
                option.overlap = OverlapMeter(option.overlap.clock)  # in unrebuilt buckets)
        starts = torch.randint(0, len(tokens) - s.seq_len - 1, (s.micro_batch,), generator=gen)
        window = torch.stack([tokens[i : i + s.seq_len + 1] for i in starts])
        loss = wrapped(window[:, :-1], window[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    elapsed = time.perf_counter() - started
    timed = s.steps - s.warmup_steps
    tail = torch.tensor(statistics.mean(losses[-max(1, s.steps // 10) :]))
    if world > 1:
        dist.all_reduce(tail)
        tail /= world
    step_hook = getattr(option, "step_hook", None)  # the periodic options' optimizer hook
    if step_hook is not None:
        step_hook.remove()
    return {
        "option": s.option if world > 1 else "single",
        "world": world,
        "step_s": elapsed / timed,
        "tokens_per_s": world * s.micro_batch * s.seq_len * timed / elapsed,
        "final_loss": tail.item(),
        "wire_bytes_per_step": (option.ledger.wire_bytes() - bytes_before) / timed
        if option
        else 0.0,
        "comm": option.report(s.steps) if option is not None else None,
    }


def counted_option(s: TrainSettings) -> GradientSync:
    """The comm option under test: one of this plugin's, which count their bytes on the wire
    and their hidden communication for the benchmark to report."""
    option = get_registry().create("comm", {"name": s.option, **s.option_settings})
    if not isinstance(option, GradientSync):
        raise ConfigError(
            f"comm={s.option} does not count its bytes and overlap (it is no "
            "xirang_comm GradientSync); benchmark one of the built-in comm options"
        )
    return option
