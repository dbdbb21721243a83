"""model=hf: a transformers causal LM behind xirang's Model contract (in-process checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from xirang_hf.model import HFCausalLM
from xirang_hf.parallelize import HFParallelize

from xirang_core.checkpoint.pretrained import load_pretrained
from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ParallelPlan, check_plan
from xirang_core.plugins import get_registry

FAMILY = ("family", "name")


def build(config: dict, seed: int = 0) -> HFCausalLM:
    torch.manual_seed(seed)
    return HFCausalLM.from_config(model_settings(config))


def test_sizes_come_from_the_config_unless_overridden(hf_config, llama_dir: Path) -> None:
    assert hf_config(llama_dir)["model"] | {"config": ""} == {
        "family": "hf",
        "name": "hf",
        "config": "",
        "pretrained": "",
        "max_seq_len": 32,
        "vocab_size": 288,
        "lora_rank": 0,
        "lora_alpha": 16.0,
        "lora_dropout": 0.0,
        "lora_targets": [],
    }
    model = build(hf_config(llama_dir, "model.vocab_size=320"))
    assert model.hf.get_input_embeddings().weight.shape == (320, 32)


def test_loss_is_the_mean_cross_entropy_of_the_logits(hf_config, gpt2_dir: Path) -> None:
    model = build(hf_config(gpt2_dir)).eval()
    x = torch.randint(0, 288, (2, 16))
    y = torch.randint(0, 288, (2, 16))
    logits = model(x)
    assert logits.shape == (2, 16, 288)
    expected = torch.nn.functional.cross_entropy(logits.view(-1, 288), y.view(-1))
    assert torch.allclose(model(x, y), expected)
    assert model.generate(x[:, :3], 5).shape == (2, 8)


def test_init_follows_transformers_and_is_drawn_per_parameter(
    hf_config, gpt2_dir: Path, tmp_path: Path
) -> None:
    """Same seed, same weights; a parameter's value depends only on its own name, not on the
    parameters created before it; GPT-2's scaled residual init and unit norms survive."""
    a, b = build(hf_config(gpt2_dir)), build(hf_config(gpt2_dir))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    config = json.loads((gpt2_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": 3}))
    deeper = dict(build(hf_config(tmp_path)).named_parameters())
    ours = dict(a.named_parameters())
    assert torch.equal(
        ours["hf.transformer.h.1.mlp.c_fc.weight"], deeper["hf.transformer.h.1.mlp.c_fc.weight"]
    )
    assert torch.equal(ours["hf.transformer.h.0.ln_1.weight"], torch.ones(32))
    fc, proj = (
        ours["hf.transformer.h.0.mlp.c_fc.weight"],
        ours["hf.transformer.h.0.attn.c_proj.weight"],
    )
    assert 0.017 < fc.std() < 0.023  # initializer_range 0.02
    assert 0.008 < proj.std() < 0.012  # GPT-2's residual projections: 0.02 / sqrt(2 * layers)
    assert a.hf.lm_head.weight is a.hf.transformer.wte.weight  # tied, as the config says


@pytest.mark.parametrize("which", ["llama_dir", "gpt2_dir"])
def test_pretrained_loads_saved_weights(
    which: str, hf_config, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Weights saved by transformers' own ``save_pretrained`` (a tied head left out) load into
    a fresh model: its logits equal the saving model's."""
    folder = request.getfixturevalue(which)
    saving = build(hf_config(folder), seed=1).eval()
    saving.hf.save_pretrained(tmp_path)
    config = hf_config(folder, f"model.pretrained={tmp_path}")
    fresh = build(config, seed=2).eval()
    x = torch.randint(0, 288, (2, 16))
    assert not torch.allclose(fresh(x), saving(x))
    load_pretrained(fresh, config, get_registry())
    assert torch.equal(fresh(x), saving(x))


def test_pretrained_that_does_not_fit_is_one_config_error(
    hf_config, llama_dir: Path, gpt2_dir: Path, tmp_path: Path
) -> None:
    build(hf_config(gpt2_dir)).hf.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"model.pretrained=.*do not fit.*missing hf\.model\."):
        hf_config(llama_dir, f"model.pretrained={tmp_path}")
    with pytest.raises(
        ConfigError, match=r"wte.weight is \[288, 32\] in the directory, \[272, 32\]"
    ):
        hf_config(gpt2_dir, f"model.pretrained={tmp_path}", "model.vocab_size=272")
    with pytest.raises(ConfigError, match="not a Hugging Face model directory"):
        hf_config(gpt2_dir, f"model.pretrained={llama_dir}")  # a config.json but no weights


def test_config_transformers_cannot_build_is_one_config_error(hf_config, tmp_path: Path) -> None:
    from transformers import ViTConfig

    ViTConfig().save_pretrained(tmp_path)  # an image encoder: no causal LM for it
    with pytest.raises(ConfigError, match=r"model.config=.*cannot build a causal LM"):
        hf_config(tmp_path)
    with pytest.raises(ConfigError, match=r"model.config=.*nowhere: no such file"):
        hf_config(tmp_path / "nowhere")


def test_tensor_parallel_only_for_llama_shaped_and_no_pipeline(
    hf_config, llama_dir: Path, gpt2_dir: Path
) -> None:
    plans = HFParallelize()
    llama = plans.shape(model_settings(hf_config(llama_dir)), 16)
    gpt2 = plans.shape(model_settings(hf_config(gpt2_dir)), 16)
    shape = (llama.heads, llama.kv_heads, llama.layers, llama.positions, llama.tied_embeddings)
    assert shape == (4, 2, 2, 0, False)
    assert (gpt2.heads, gpt2.positions, gpt2.tied_embeddings) == (2, 32, True)
    check_plan(ParallelPlan(tp=2, micro_batch=4), llama, 8)
    with pytest.raises(ConfigError, match="no tensor-parallel layout"):
        check_plan(ParallelPlan(tp=2, micro_batch=4), gpt2, 8)
    with pytest.raises(ConfigError, match="cannot cut this model into pipeline stages"):
        check_plan(ParallelPlan(pp=2, micro_batch=2), llama, 8)


def test_shape_counts_every_parameter(hf_config, llama_dir: Path, gpt2_dir: Path) -> None:
    for folder in (llama_dir, gpt2_dir):
        config = hf_config(folder)
        model = build(config)
        shape = HFParallelize().shape(model_settings(config), 16)
        assert shape.params == model.num_params(non_embedding=False)
        # FLOPs: 6N + 12·L·h·s with N without lookup-only tables
        lookups = shape.positions * 32 + (0 if shape.tied_embeddings else 288 * 32)
        assert model.num_params() == shape.params - lookups
        assert model.flops_per_token(16) == 6 * model.num_params() + 12 * 2 * 32 * 16


def model_settings(config: dict) -> dict:
    return {k: v for k, v in config["model"].items() if k not in FAMILY}


def test_without_transformers_the_error_says_what_to_install(llama_dir: Path) -> None:
    import dataclasses

    from xirang_core.config import compose
    from xirang_core.errors import PluginError

    registry = get_registry()
    spec = dataclasses.replace(registry.spec("model", "hf"), requires=("no_such_transformers",))
    models = {**registry.specs["model"], "hf": spec}
    lacking = dataclasses.replace(registry, specs={**registry.specs, "model": models})
    with pytest.raises(
        PluginError, match=r"needs no_such_transformers.*pip install 'xirang\[hf\]'"
    ):
        compose(["model=hf", f"model.config={llama_dir}"], lacking)
