"""parallel=colossalai: listed with its install when Colossal-AI is missing; plan mapping and
the CPU-capable TorchDDP path when it is installed; GPU-only plugins refused on CPU."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from xirang_colossalai.strategy import ColossalStrategy

from xirang_core.errors import ConfigError, PluginError
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

HAVE_COLOSSAL = importlib.util.find_spec("colossalai") is not None


def test_listed_with_install_hint() -> None:
    spec = get_registry().spec("parallel", "colossalai")
    assert spec.missing() == ([] if HAVE_COLOSSAL else ["colossalai"])
    assert "--no-deps colossalai==0.5.0" in spec.install


@pytest.mark.skipif(HAVE_COLOSSAL, reason="checks the behaviour without Colossal-AI")
def test_selecting_it_without_colossalai_says_how_to_install() -> None:
    with pytest.raises(PluginError, match=r"--no-deps colossalai==0\.5\.0"):
        get_registry().load("parallel", "colossalai")


@pytest.mark.parametrize("plugin", ["low_level_zero", "gemini", "hybrid_parallel"])
def test_gpu_only_plugins_refused_on_cpu(plugin: str) -> None:
    strategy = ColossalStrategy(plugin=plugin)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", {})
    with pytest.raises(ConfigError, match="needs a GPU"):
        strategy.wrap(torch.nn.Linear(2, 2), ctx)


def test_unknown_plugin_lists_valid_ones() -> None:
    with pytest.raises(ConfigError, match="torch_ddp"):
        ColossalStrategy(plugin="zero_bubble")


@pytest.mark.skipif(not HAVE_COLOSSAL, reason="Colossal-AI is an optional install")
def test_plan_maps_to_booster_plugins() -> None:
    from colossalai.booster import plugin
    from xirang_colossalai.strategy import ColossalConfig, booster_plugin

    assert isinstance(booster_plugin(ColossalConfig()), plugin.TorchDDPPlugin)
    hybrid = booster_plugin(ColossalConfig(plugin="hybrid_parallel", tp=2, pp=2, micro_batches=4))
    assert isinstance(hybrid, plugin.HybridParallelPlugin)


@pytest.mark.skipif(not torch.cuda.is_available() or not HAVE_COLOSSAL, reason="needs a GPU")
def test_low_level_zero_boosts_on_gpu() -> None:
    from colossalai.booster import Booster
    from xirang_colossalai.strategy import ColossalConfig, booster_plugin

    assert Booster(plugin=booster_plugin(ColossalConfig(plugin="low_level_zero", zero=2)))
