"""What the Booster is given on a GPU, checked without one: Gemini's precision, trainer.grad_clip
as the plugin's max_norm, and hybrid_parallel's ShardFormer policy and model.

Colossal-AI is not installed here, so a hand-written fake ``colossalai`` package (the three
modules the strategy imports) records each plugin's constructor arguments and what is boosted;
``torch.cuda.is_bf16_supported`` is patched to say what the device has. The models, the
optimizer and the llama->Hugging Face twin are real."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch
from torch import nn
from xirang_colossalai.strategy import ColossalStrategy

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

TINY_LLAMA = ["model=llama_tiny", "tokenizer=bytes", "model.dim=32", "model.n_layers=2"]
TINY_LLAMA += ["model.ffn_dim=64", "data.seq_len=16", "trainer.grad_clip=0.5"]
HYBRID = ["parallel=colossalai", "parallel.plugin=hybrid_parallel"]


class LlamaForCausalLMPolicy:
    """Stands for Colossal-AI's policy class."""


class Booster:
    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin
        self.boosted: list[nn.Module] = []

    def boost(self, model: nn.Module, optimizer: Any) -> tuple[Any, ...]:
        self.boosted.append(model)
        return model, optimizer, None, None, None

    def execute_pipeline(self, data, model, criterion, optimizer=None, return_loss=False) -> dict:
        """One stage holding every layer: the schedule's loss is the criterion's."""
        self.optimizers = [*getattr(self, "optimizers", []), optimizer]
        batch = next(data)
        return {"loss": criterion(model(**batch), batch)}


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Each fake plugin's keyword arguments, by class name."""
    record: dict[str, dict[str, Any]] = {}

    def plugin_class(name: str) -> type:
        def init(self: Any, **kwargs: Any) -> None:
            record[name] = kwargs

        return type(name, (), {"__init__": init, "support_no_sync": lambda self: False})

    plugin = types.ModuleType("colossalai.booster.plugin")
    for name in ("TorchDDPPlugin", "LowLevelZeroPlugin", "GeminiPlugin", "HybridParallelPlugin"):
        setattr(plugin, name, plugin_class(name))
    booster = types.ModuleType("colossalai.booster")
    booster.Booster, booster.plugin = Booster, plugin
    llama = types.ModuleType("colossalai.shardformer.policies.llama")
    llama.LlamaForCausalLMPolicy = LlamaForCausalLMPolicy
    for name, module in {
        "colossalai": types.ModuleType("colossalai"),
        "colossalai.booster": booster,
        "colossalai.booster.plugin": plugin,
        "colossalai.shardformer": types.ModuleType("colossalai.shardformer"),
        "colossalai.shardformer.policies": types.ModuleType("colossalai.shardformer.policies"),
        "colossalai.shardformer.policies.llama": llama,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    return record


def gpu_ctx(config: dict[str, Any]) -> WorkerContext:
    return WorkerContext(0, 0, 1, torch.device("cuda", 0), "", config)


def tiny_llama(config: dict[str, Any]) -> nn.Module:
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    torch.manual_seed(0)
    return get_registry().load("model", "llama").from_config(settings)


@pytest.mark.parametrize("bf16", [True, False])
def test_gemini_default_fp32_becomes_bf16_or_is_refused(made, monkeypatch, bf16: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    config = compose(TINY_LLAMA)
    strategy = ColossalStrategy(plugin="gemini")  # precision: fp32, the option's default
    if not bf16:
        with pytest.raises(ConfigError, match=r"parallel\.precision=fp16"):
            strategy.wrap(tiny_llama(config), gpu_ctx(config))
        assert "GeminiPlugin" not in made  # refused before the plugin was built
        return
    strategy.wrap(tiny_llama(config), gpu_ctx(config))
    assert made["GeminiPlugin"]["precision"] == "bf16"


@pytest.mark.parametrize("plugin", ["low_level_zero", "gemini"])
def test_grad_clip_is_the_plugins_max_norm(made, monkeypatch, plugin: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    config = compose(TINY_LLAMA)
    strategy = ColossalStrategy(plugin=plugin)
    wrapped = strategy.wrap(tiny_llama(config), gpu_ctx(config))
    name = {"low_level_zero": "LowLevelZeroPlugin", "gemini": "GeminiPlugin"}[plugin]
    assert made[name]["max_norm"] == 0.5
    clip = strategy.runner(wrapped).clip
    assert clip is not None and clip(0.5) is None  # the loop leaves clipping to the plugin's step


def test_hybrid_parallel_shards_the_llamas_hf_twin_with_colossals_policy(made) -> None:
    config = compose(TINY_LLAMA)
    model = tiny_llama(config)
    strategy = ColossalStrategy(plugin="hybrid_parallel")
    wrapped = strategy.wrap(model, gpu_ctx(config))
    hybrid = made["HybridParallelPlugin"]
    assert isinstance(hybrid["custom_policy"], LlamaForCausalLMPolicy)
    assert hybrid["max_norm"] == 0.5 and hybrid["parallel_output"] is False
    from transformers import LlamaForCausalLM

    [boosted] = strategy.booster.boosted
    assert isinstance(boosted, LlamaForCausalLM)  # what ShardFormer's policy is keyed by
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():  # the twin is the same function as the model it stands for
        torch.testing.assert_close(wrapped(idx), model(idx), rtol=1e-4, atol=1e-4)


def test_hybrid_parallel_refuses_other_families_before_any_worker() -> None:
    with pytest.raises(ConfigError, match="Llama ShardFormer policy"):
        compose(["model=gpt_tiny", "tokenizer=bytes", *HYBRID])


def test_hybrid_parallel_refuses_a_non_llama_hf_config(tmp_path) -> None:
    from transformers import GPT2Config

    GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=288, n_positions=32).save_pretrained(
        tmp_path
    )
    with pytest.raises(ConfigError, match="model_type is 'gpt2'"):
        compose(
            ["model=hf", f"model.config={tmp_path}", "tokenizer=bytes", "data.seq_len=16", *HYBRID]
        )


class HeldOut:
    """Fixed held-out batches (what the worker's ``val`` reader hands ``evaluate``)."""

    def __init__(self, n: int, seq_len: int) -> None:
        seed = torch.Generator().manual_seed(1)
        rows = torch.randint(0, 256, (n, 2, seq_len + 1), generator=seed)
        self.batches = [(r[:, :-1], r[:, 1:]) for r in rows]

    def get(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[i % len(self.batches)]


def test_hybrid_parallel_evaluates_and_samples_the_twin_it_trained(made) -> None:
    """model=llama under hybrid_parallel trains the Hugging Face twin: the run's validation
    loss and sample must come from it, not from the Llama it was copied from."""
    from xirang_tokenizers.bytes import ByteTokenizer

    from xirang_core.train.loop import EVAL_BATCHES, evaluate
    from xirang_core.train.worker import (
        Assembly,
        final_sample,
        held_out_loss,
        sample_text,
    )

    config = compose([*TINY_LLAMA, "trainer.sample_tokens=12"])
    model = tiny_llama(config)
    strategy = ColossalStrategy(plugin="hybrid_parallel")
    twin = strategy.wrap(model, gpu_ctx(config))
    val, cpu = HeldOut(EVAL_BATCHES, 16), torch.device("cpu")
    for _ in range(15):  # what the loop does to the boosted model: its optimizer's steps
        twin(*val.get(0)).backward()
        strategy.optimizer.step()
        strategy.optimizer.zero_grad()
    tokenizer = ByteTokenizer("\n\n")
    parts = Assembly(
        ctx=WorkerContext(0, 0, 1, cpu, "", config),
        model=model,
        wrapped=twin,
        optimizer=strategy.optimizer,
        train=types.SimpleNamespace(tokenizer=tokenizer),
        val=val,
        settings=types.SimpleNamespace(accum_steps=1, eval_batches=EVAL_BATCHES),  # one micro-batch
        strategy=strategy,
        runner=strategy.runner(twin),
    )
    trained, untrained = (evaluate(m, val, cpu, EVAL_BATCHES) for m in (twin, model))
    assert trained < untrained - 0.1  # the twin learned; the Llama did not move
    assert held_out_loss(parts) == pytest.approx(trained)
    sample = final_sample(config, parts)
    assert sample == sample_text(twin, config["trainer"], cpu, tokenizer)
    assert sample != sample_text(model, config["trainer"], cpu, tokenizer)


def test_hybrid_parallel_with_a_pipeline_evaluates_forward_only(made) -> None:
    """pp > 1: no plain forward runs on a stage; the held-out loss comes from Colossal-AI's
    schedule without an optimizer (forwards only), over a step's micro-batches per run."""
    from xirang_core.train.loop import evaluate

    config = compose(TINY_LLAMA)
    strategy = ColossalStrategy(plugin="hybrid_parallel", pp=2)
    twin = strategy.wrap(tiny_llama(config), gpu_ctx(config))
    val, cpu = HeldOut(4, 16), torch.device("cpu")
    pipelined = evaluate(twin, val, cpu, 2, strategy.runner(twin))  # the runner's evaluate
    assert strategy.booster.optimizers == [None, None]  # forward-only runs, one per batch
    # the same batches through the twin's own forward
    plain = evaluate(twin, HeldOut(4, 16), cpu, 2 * strategy.micro_batches)
    assert pipelined == pytest.approx(plain, rel=0.05)  # transformers skips each row's last target
