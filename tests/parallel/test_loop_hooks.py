"""A strategy may own backward and clipping (Colossal-AI's Booster does): the loop calls the
model's ``xirang_backward`` / ``xirang_clip`` instead of its own."""

from __future__ import annotations

from typing import Any

import torch

from xirang_core.parallel.smoke import SyntheticBatches
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext
from xirang_core.train.loop import LoopSettings, Trainer


def test_loop_uses_the_strategys_backward_and_clip(tiny_config: dict[str, Any]) -> None:
    settings = {k: v for k, v in tiny_config["model"].items() if k not in ("family", "name")}
    model = get_registry().load("model", "gpt").from_config(settings)
    calls: list[str] = []

    def backward(loss: torch.Tensor) -> None:
        calls.append("backward")
        loss.backward()

    model.xirang_backward = backward
    model.xirang_clip = lambda max_norm: calls.append(f"clip {max_norm}")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", tiny_config)
    batches = SyntheticBatches(settings["vocab_size"], 16, 2, 0, 0, 3)
    loop = LoopSettings(1, 3, 2, 16, 1, 0.5, tiny_config["optim"], 0.0, 0.0)
    Trainer(model, optimizer, batches, loop, ctx, get_registry().hook, None).train_step(1)
    assert calls == ["backward"] * 3 + ["clip 0.5"]
    assert all(p.grad is None for p in model.parameters())  # stepped and zeroed
