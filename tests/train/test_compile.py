"""trainer.compile: torch.compile per block in place, its time apart from step time, and one
clear error where no compiler backend can work."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xirang_ckpt.export import model_tensors

from tests.conftest import QUICK, run_dirs
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.plugins import get_registry
from xirang_core.train.compile import compile_model, compiler_problem


def test_a_missing_cxx_compiler_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "no-such-c++")
    assert "'no-such-c++' is not on PATH" in (compiler_problem("cpu") or "")
    monkeypatch.delenv("CXX")
    assert compiler_problem("cpu") is None  # g++ is here


def test_compile_without_a_compiler_stops_before_any_worker(run_xirang: Callable) -> None:
    result = run_xirang(*QUICK, "device=cpu", "trainer.compile=true", env={"CXX": "no-such-c++"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "xirang error: trainer.compile=true cannot work on device=cpu: inductor compiles CPU "
        "kernels with a C++ compiler, and 'no-such-c++' is not on PATH (install g++, or point "
        "CXX at one)"
    )
    assert not re.search(r"^step \d+", result.stdout, re.M)  # no step ran


def test_each_block_compiles_in_place_and_names_stay(tiny: dict[str, Any]) -> None:
    settings = {k: v for k, v in tiny["model"].items() if k not in ("family", "name")}
    model = get_registry().load("model", "gpt").from_config(settings)
    names = list(model.state_dict())
    compile_model(model, {**tiny, "trainer": {**tiny["trainer"], "compile": True}})
    assert all(block._compiled_call_impl is not None for block in model.blocks.values())
    assert model._compiled_call_impl is None  # blocks, not the whole model
    assert list(model.state_dict()) == names


def compiled_run(run_xirang: Callable, tmp_path: Path, *args: str) -> tuple[dict, list, Path]:
    result = run_xirang(*QUICK, "device=cpu", "trainer.compile=true", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "compile" in result.stdout  # the printed summary shows it
    run_dir = run_dirs(tmp_path)[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, records, run_dir


@pytest.mark.slow
def test_compiled_single_run_reports_compile_time_apart(
    run_xirang: Callable, tmp_path: Path
) -> None:
    summary, records, run_dir = compiled_run(run_xirang, tmp_path)
    assert summary["compile_steps"] >= 1 and summary["compile_s"] > 0
    assert records[0]["compile_s"] > 0 and "compile_s" not in records[-1]
    # the summary's rate leaves the compiling steps out: faster than tokens over all the time
    assert summary["tokens_per_s"] > summary["tokens"] / summary["wall_time_s"]
    store = CheckpointStore.at(str(run_dir / "checkpoints"))
    manifest = next(c.manifest for c in store.candidates() if c.manifest is not None)
    assert not any("_orig_mod" in name for name in model_tensors(store, manifest))


@pytest.mark.slow
def test_compiled_ddp_with_two_workers(run_xirang: Callable, tmp_path: Path) -> None:
    summary, _, _ = compiled_run(run_xirang, tmp_path, "trainer.nproc=2", "parallel=ddp")
    assert summary["world_size"] == 2 and summary["compile_s"] > 0


def test_the_llama_head_and_loss_compile_with_its_blocks(tiny: dict[str, Any]) -> None:
    import torch

    settings = {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 32}
    model = get_registry().load("model", "llama").from_config({**settings, "vocab_size": 32})
    names, eager = list(model.state_dict()), model.head_loss
    config = {**tiny, "model": {"family": "llama"}, "trainer": {**tiny["trainer"], "compile": True}}
    compile_model(model, config)
    assert model.head_loss is not eager and list(model.state_dict()) == names
    x, targets = torch.randn(2, 8, 16), torch.randint(0, 32, (2, 8))
    torch.testing.assert_close(model.head_loss(x, targets), eager(x, targets))


class HeldOut:
    """Held-out batches as the loop reads them: ``get(i)`` -> (inputs, targets)."""

    def get(self, i: int) -> tuple[Any, Any]:
        import torch

        x = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(i))
        return x, x


def test_evaluation_runs_the_compiled_blocks_without_compiling_again() -> None:
    """No gradients and eval mode fail the training graph's guards: evaluation runs those
    blocks eager rather than compile each again, and its loss is the eager model's."""
    import copy

    import torch
    from xirang_llama.model import Llama, LlamaConfig

    from xirang_core.train.compile import compiled_frames
    from xirang_core.train.loop import evaluate

    torch.manual_seed(0)
    eager = Llama(
        LlamaConfig(dim=16, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=32, vocab_size=40)
    )
    model = copy.deepcopy(eager)
    for layer in model.layers.values():
        layer.compile(backend="eager")  # dynamo's guards and frames, no code generation
    torch._dynamo.reset()
    x, y = HeldOut().get(99)
    model(x, y).backward()  # the training graph
    trained = compiled_frames()
    assert trained > 0
    loss = evaluate(model, HeldOut(), "cpu", 2)
    assert compiled_frames() == trained
    assert loss == pytest.approx(evaluate(eager, HeldOut(), "cpu", 2), rel=1e-6)
