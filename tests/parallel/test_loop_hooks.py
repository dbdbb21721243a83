"""A strategy may own backward and clipping (Colossal-AI's Booster does): the loop calls its
step runner's ``backward`` / ``clip`` instead of its own. A strategy written before
``Strategy.runner`` set them as attributes on its module: they still count, with a warning."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xirang.planning.smoke import SyntheticBatches
from xirang_core.plugins import get_registry
from xirang_core.specs import StepRunner, StrategyBase, WorkerContext
from xirang_core.train.loop import LoopSettings, Trainer


def _one_step(config: dict[str, Any], model: torch.nn.Module, runner: StepRunner) -> None:
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", config)
    batches = SyntheticBatches(settings["vocab_size"], 16, 2, 0, 0, 3)
    loop = LoopSettings(1, 3, 2, 16, 1, 0.5, config["optim"], 0.0, 0.0)
    hook = get_registry().hook
    Trainer(model, optimizer, batches, loop, ctx, hook, None, None, runner).train_step(1)


@pytest.fixture
def model(tiny_config: dict[str, Any]) -> torch.nn.Module:
    settings = {k: v for k, v in tiny_config["model"].items() if k not in ("family", "name")}
    return get_registry().load("model", "gpt").from_config(settings)


def _recording(calls: list[str]) -> StepRunner:
    def backward(loss: torch.Tensor) -> None:
        calls.append("backward")
        loss.backward()

    return StepRunner(backward=backward, clip=lambda max_norm: calls.append(f"clip {max_norm}"))


def test_loop_uses_the_strategys_backward_and_clip(tiny_config, model) -> None:
    calls: list[str] = []
    _one_step(tiny_config, model, _recording(calls))
    assert calls == ["backward"] * 3 + ["clip 0.5"]
    assert all(p.grad is None for p in model.parameters())  # stepped and zeroed


def test_a_strategy_that_sets_the_old_attributes_still_runs_them(tiny_config, model) -> None:
    calls: list[str] = []
    made = _recording(calls)
    model.xirang_backward, model.xirang_clip = made.backward, made.clip
    with pytest.warns(DeprecationWarning, match="xirang_backward, xirang_clip"):
        runner = StrategyBase().runner(model)
    _one_step(tiny_config, model, runner)
    assert calls == ["backward"] * 3 + ["clip 0.5"]
