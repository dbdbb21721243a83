"""Llama 3.1's RoPE scaling (``rope_type: llama3``): a folder saved by transformers with it
loads into the Llama family (``model.pretrained``) and computes transformers' logits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from xirang_core.checkpoint.pretrained import load_pretrained
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
SHAPE = [
    "model.dim=64",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_dim=96",
    "model.max_seq_len=64",
    "model.vocab_size=256",
    "model.tie_embeddings=false",
    "model.rope_theta=500000.0",
]


def save_llama(folder: Path, rope_scaling: dict | None) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        rope_scaling=dict(rope_scaling or {}) or None,  # transformers adds to the dict it gets
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    return model


def test_llama3_scaled_rope_gives_transformers_logits(tmp_path: Path) -> None:
    theirs = save_llama(tmp_path, SCALING)
    config = compose(
        ["model=llama_tiny", "tokenizer=bytes", *SHAPE, f"model.pretrained={tmp_path}"]
    )
    assert config["model"]["rope_scaling"] == SCALING  # taken from the folder
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    ours = get_registry().load("model", "llama").from_config(settings).eval()
    load_pretrained(ours, config, get_registry())
    x = torch.randint(0, 256, (2, 48))  # past the original 16 positions
    with torch.no_grad():
        expected = theirs(x).logits
        assert torch.allclose(ours(x), expected, atol=1e-5)
        plain = {**settings, "rope_scaling": {}}
        unscaled = get_registry().load("model", "llama").from_config(plain).eval()
        unscaled.load_state_dict(ours.state_dict())
        assert not torch.allclose(unscaled(x), expected, atol=1e-3)  # the scaling matters


def test_another_rope_type_is_refused(tmp_path: Path) -> None:
    save_llama(tmp_path, {"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ConfigError, match=r"rope_type='dynamic'.*'llama3'"):
        compose(["model=llama_tiny", "tokenizer=bytes", *SHAPE, f"model.pretrained={tmp_path}"])


def test_pretrained_takes_the_folders_shape_unless_given(tmp_path: Path) -> None:
    """``model=llama_tiny model.pretrained=DIR`` builds the folder's shape, not llama_tiny's;
    a setting given on the command line must match the folder, or it is one error."""
    save_llama(tmp_path, None)
    model = compose(["model=llama_tiny", "tokenizer=bytes", f"model.pretrained={tmp_path}"])[
        "model"
    ]
    shape = {"dim": 64, "n_layers": 2, "n_kv_heads": 2, "ffn_dim": 96, "tie_embeddings": False}
    assert {k: model[k] for k in shape} == shape and model["rope_scaling"] == {}
    with pytest.raises(ConfigError, match=r"dim \(run 32, dir 64\).*model\.dim=64"):
        compose(
            ["model=llama_tiny", "tokenizer=bytes", "model.dim=32", f"model.pretrained={tmp_path}"]
        )
