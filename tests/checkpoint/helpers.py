"""A small model and a worker context for checkpoint tests."""

from __future__ import annotations

from typing import Any

import torch

from xirang_core.checkpoint.manager import CheckpointManager
from xirang_core.specs import WorkerContext


class Tiny(torch.nn.Module):
    """An embedding (frozen when asked), a linear layer, dropout: state, RNG use, both."""

    def __init__(self, frozen_embedding: bool = False, dropout: float = 0.1) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(512, 64)
        self.lin = torch.nn.Linear(64, 64)
        self.drop = torch.nn.Dropout(dropout)
        self.emb.weight.requires_grad_(not frozen_embedding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(self.emb(x))).pow(2).mean()


def build(
    seed: int = 0, frozen: bool = False, dropout: float = 0.1
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Tiny(frozen, dropout)
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, optim


def batch(step: int, rank: int = 0, world: int = 1, size: int = 8) -> torch.Tensor:
    """This rank's slice of the global batch of ``step``: the same global batch at any world
    size, so runs on 1 and 2 workers see the same data."""
    g = torch.Generator().manual_seed(step)
    full = torch.randint(0, 512, (size,), generator=g)
    share = size // world
    return full[rank * share : (rank + 1) * share]


def train_step(model: torch.nn.Module, optim: torch.optim.Optimizer, step: int, **kw: Any) -> float:
    loss = model(batch(step, **kw))
    loss.backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    return loss.item()


def manager(
    run_dir: str,
    model: torch.nn.Module,
    optim: torch.optim.Optimizer,
    rank: int = 0,
    world: int = 1,
    **checkpoint: Any,
) -> CheckpointManager:
    ctx = WorkerContext(rank, rank, world, torch.device("cpu"), run_dir, {})
    config = {"checkpoint": {"interval": 0, "chunk_mb": 0.01, **checkpoint}, "optim": {}}
    return CheckpointManager.from_config(config, ctx, model, optim)


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def saved_run(
    run: str, async_save: bool = True
) -> tuple[torch.nn.Module, torch.optim.Optimizer, str]:
    """A model and optimizer trained two steps and saved at step 2 under ``run``; with the
    committed step folder."""
    model, optim = build()
    mgr = manager(run, model, optim, async_save=async_save)
    for step in (1, 2):
        train_step(model, optim, step)
    mgr.save(2)
    mgr.wait(raise_errors=True)
    return model, optim, f"{run}/checkpoints/step-000000002"
