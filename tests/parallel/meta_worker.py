"""What one rank of the sharded-start tests runs (spawned by test_meta_init.py through
``run_group``, which opens the gloo group): the worker's own build, wrap and materialise."""

from __future__ import annotations

import resource
from typing import Any

import torch

from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext
from xirang_core.train.init import materialize
from xirang_core.train.worker import assemble, build_model, starts_sharded


def started_weights(rank: int, world: int, configs: list[dict[str, Any]]) -> list[Any]:
    """Per config: whether it started on meta, and every parameter's whole value (gathered
    from the shards) on rank 0, by the unwrapped model's names."""
    from xirang_core.train.init import model_name

    registry = get_registry()
    found = []
    for config in configs:
        ctx = WorkerContext(rank, rank, world, torch.device("cpu"), "", config)
        settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
        strategy = registry.create("parallel", config["parallel"])
        on_meta = starts_sharded(config, ctx, strategy)
        model = build_model(config, settings, ctx.device, registry, True)
        ctx.mesh = strategy.build_mesh(ctx)
        strategy.wrap(model, ctx)
        materialize(model, ctx.device, config["seed"])
        whole = {
            model_name(n): p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()
            for n, p in model.named_parameters()
        }
        found.append((on_meta, whole if rank == 0 else {}))
    return found


def start_peak_rss(rank: int, world: int, config: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """The rise of this worker's peak RSS from its post-import baseline to the moment the
    model is built, wrapped and materialised (``assemble``), and the loss of one step after."""
    from xirang_core.train.loop import Trainer

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    registry = get_registry()
    ctx = WorkerContext(rank, rank, world, torch.device("cpu"), run_dir, config)
    parts = assemble(config, ctx, registry)
    started = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    trainer = Trainer(
        parts.wrapped, parts.optimizer, parts.train, parts.settings, ctx, registry.hook, None
    )
    loss = trainer.train_step(1).item()
    return {"rise": started - baseline, "loss": loss, "params": parts.params}
