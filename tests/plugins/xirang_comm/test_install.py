"""Installing a comm option: what it refuses, and what it does with one worker."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext


def ctx(world: int) -> WorkerContext:
    return WorkerContext(0, 0, world, torch.device("cpu"), "", {"device": {"name": "cpu"}})


def test_a_strategy_without_ddp_is_refused_with_the_fix() -> None:
    option = get_registry().create("comm", {"name": "powersgd"})
    with pytest.raises(ConfigError, match=r"wrapped the model in Linear.*Use parallel=ddp"):
        option.install_hooks(nn.Linear(2, 2), ctx(2))


def test_one_worker_installs_nothing_and_reports_nothing_sent() -> None:
    option = get_registry().create("comm", {"name": "fp16"})
    option.install_hooks(nn.Linear(2, 2), ctx(1))
    report = option.report(steps=5)
    assert report["wire_bytes"] == 0 and report["collectives"] == {}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"name": "powersgd", "rank": 0}, "rank must be >= 1"),
        ({"name": "topk", "ratio": 1.5}, r"must be in \(0, 1\]"),
        ({"name": "localsgd", "every": 0}, "must be at least 1"),
        ({"name": "fp16", "sync_period_ms": 10, "sync_slot": 2, "sync_slots": 2}, "slot < slots"),
    ],
)
def test_bad_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_registry().create("comm", settings).resolve_window(ctx(2))
