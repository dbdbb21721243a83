"""A tiny composed config and an in-process trainer for the loop's unit tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.parallel.conftest import TINY
from xirang.planning.smoke import SyntheticBatches
from xirang_core.config import compose
from xirang_core.plugins import get_registry
from xirang_core.run import resolve_runtime
from xirang_core.specs import WorkerContext
from xirang_core.train.loop import LoopSettings, Trainer
from xirang_core.train.optim import build_optimizer
from xirang_core.train.worker import Assembly, assemble, open_worker


@pytest.fixture(scope="session")
def tiny() -> dict[str, Any]:
    return compose(TINY)


@pytest.fixture
def make_trainer(tiny: dict[str, Any]) -> Callable[..., Trainer]:
    """A Trainer over the tiny GPT on synthetic batches; keywords set LoopSettings fields."""

    def make(**loop: Any) -> Trainer:
        torch.manual_seed(0)
        settings = {k: v for k, v in tiny["model"].items() if k not in ("family", "name")}
        model = get_registry().load("model", "gpt").from_config(settings)
        optimizer = build_optimizer(model, tiny["optim"])
        ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", tiny)
        batches = SyntheticBatches(settings["vocab_size"], 16, 4, 0, 0, 2)
        fields = {"max_steps": 10, "accum_steps": 2, "micro_batch": 4, "seq_len": 16}
        fields |= {"log_every": 1, "grad_clip": 1.0, "optim": tiny["optim"]}
        fields |= {"flops_per_token": 0.0, "peak_flops": 0.0, **loop}
        return Trainer(model, optimizer, batches, LoopSettings(**fields), ctx, None, None)

    return make


@contextlib.contextmanager
def assembled(overrides: list[str], run_dir: Path) -> Iterator[Assembly]:
    """One worker's parts for the run ``overrides`` compose, in this process, as a worker
    builds them from its config.yaml (runtime resolved, process group open)."""
    config = compose(overrides)
    registry = get_registry()
    config = resolve_runtime(config, registry)
    run_dir.mkdir()
    ctx = open_worker(config, str(run_dir), registry)
    try:
        yield assemble(config, ctx, registry)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
