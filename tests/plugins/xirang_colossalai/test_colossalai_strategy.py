"""parallel=colossalai: listed with its install when Colossal-AI is missing; plan mapping, the
CPU-capable TorchDDP path and the Booster-owned step when it is installed; the GPU-only plugins
refused on CPU with what they need, and trained where a GPU is present."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
from xirang_colossalai.strategy import ColossalConfig, ColossalStrategy, step_micro_batches

from xirang_core.errors import ConfigError, PluginError
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

HAVE_COLOSSAL = importlib.util.find_spec("colossalai") is not None
NO_COLOSSAL = "Colossal-AI is an optional install (docs/parallel.md)"
NO_GPU = "needs a CUDA GPU and Colossal-AI: LowLevelZero, Gemini and HybridParallel run on GPU only"
needs_colossal = pytest.mark.skipif(not HAVE_COLOSSAL, reason=NO_COLOSSAL)
needs_gpu = pytest.mark.skipif(not (HAVE_COLOSSAL and torch.cuda.is_available()), reason=NO_GPU)


def test_listed_with_install_hint() -> None:
    spec = get_registry().spec("parallel", "colossalai")
    assert spec.missing() == ([] if HAVE_COLOSSAL else ["colossalai"])
    assert "--no-deps colossalai==0.5.0" in spec.install


@pytest.mark.skipif(HAVE_COLOSSAL, reason="checks the behaviour without Colossal-AI")
def test_selecting_it_without_colossalai_says_how_to_install() -> None:
    with pytest.raises(PluginError, match=r"--no-deps colossalai==0\.5\.0"):
        get_registry().load("parallel", "colossalai")


@pytest.mark.parametrize("plugin", ["low_level_zero", "gemini", "hybrid_parallel"])
def test_gpu_only_plugins_refused_on_cpu_saying_what_they_need(plugin: str) -> None:
    strategy = ColossalStrategy(plugin=plugin)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", {})
    with pytest.raises(ConfigError, match="needs a GPU") as refused:
        strategy.wrap(torch.nn.Linear(2, 2), ctx)
    assert "device=cuda" in str(refused.value) and "plugin=torch_ddp" in str(refused.value)


def test_unknown_plugin_lists_valid_ones() -> None:
    with pytest.raises(ConfigError, match="torch_ddp"):
        ColossalStrategy(plugin="zero_bubble")


def test_pipeline_takes_the_steps_own_micro_batches() -> None:
    config = {
        "trainer": {"global_batch": 32, "micro_batch": 2},
        "parallel": {"name": "colossalai", "tp": 2, "pp": 2},
    }
    ctx = WorkerContext(0, 0, 8, torch.device("cpu"), "", config)
    assert step_micro_batches(ctx) == 8  # 2 data-parallel replicas x 2 sequences x 8


@needs_colossal
def test_plan_maps_to_booster_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's numbers reach each plugin (constructors recorded: the real ones need a
    process group, and the GPU-only ones a GPU)."""
    from colossalai.booster import plugin
    from xirang_colossalai.strategy import booster_plugin

    made: dict[str, dict[str, Any]] = {}
    for name in ("TorchDDPPlugin", "LowLevelZeroPlugin", "GeminiPlugin", "HybridParallelPlugin"):
        monkeypatch.setattr(plugin, name, lambda _n=name, **kw: made.setdefault(_n, kw))
    booster_plugin(ColossalConfig())
    booster_plugin(ColossalConfig(plugin="low_level_zero", zero=2))
    booster_plugin(ColossalConfig(plugin="hybrid_parallel", tp=2, pp=2), step_micro=4)
    assert set(made) == {"TorchDDPPlugin", "LowLevelZeroPlugin", "HybridParallelPlugin"}
    assert made["LowLevelZeroPlugin"]["stage"] == 2
    hybrid = made["HybridParallelPlugin"]
    assert (hybrid["tp_size"], hybrid["pp_size"], hybrid["num_microbatches"]) == (2, 2, 4)
    with pytest.raises(ConfigError, match="low_level_zero takes 1 or 2"):
        booster_plugin(ColossalConfig(plugin="low_level_zero", zero=3))


def _train(rank: int, world: int, parallel: dict[str, Any], device: str) -> list[float]:
    """Two steps of the tiny GPT through the loop with the Colossal-AI strategy."""
    from xirang.planning.smoke import SyntheticBatches
    from xirang_core.config import compose as compose_config
    from xirang_core.train.loop import LoopSettings, Trainer

    config = compose_config(
        [
            "model=gpt_tiny",
            "tokenizer=bytes",
            "model.n_layer=2",
            "model.n_embd=32",
            "model.n_head=2",
        ]
    )
    config["parallel"] = parallel
    config["trainer"].update(global_batch=4 * world, micro_batch=2)
    dev = torch.device(device, rank) if device == "cuda" else torch.device(device)
    ctx = WorkerContext(rank, rank, world, dev, "", config)
    torch.manual_seed(0)
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    model = get_registry().load("model", "gpt").from_config(settings).to(dev)
    strategy = ColossalStrategy(**{k: v for k, v in parallel.items() if k != "name"})
    wrapped = strategy.wrap(model, ctx)
    batches = SyntheticBatches(settings["vocab_size"], 16, 2, 0, rank, 2)
    loop = LoopSettings(2, 2, 2, 16, 1, 1.0, config["optim"], 0.0, 0.0)
    hook, runner = get_registry().hook, strategy.runner(wrapped)
    trainer = Trainer(wrapped, strategy.optimizer, batches, loop, ctx, hook, None, None, runner)
    return [trainer.train_step(step).item() for step in (1, 2)]


@needs_colossal
def test_torch_ddp_trains_on_cpu_workers() -> None:
    from xirang.comm.launch import run_group

    losses = run_group(_train, 2, {"name": "colossalai", "plugin": "torch_ddp"}, "cpu")
    assert all(loss > 0 for rank in losses for loss in rank)


@needs_gpu
@pytest.mark.parametrize(
    "parallel",
    [
        {"plugin": "low_level_zero", "zero": 1},
        {"plugin": "low_level_zero", "zero": 2},
        {"plugin": "gemini"},
        {"plugin": "hybrid_parallel", "zero": 1},
    ],
)
def test_gpu_plugins_train_through_the_booster(parallel: dict[str, Any]) -> None:
    from xirang.comm.launch import run_group

    [losses] = run_group(_train, 1, {"name": "colossalai", **parallel}, "cuda", backend="nccl")
    assert all(loss > 0 for loss in losses)
