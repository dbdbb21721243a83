"""The Hugging Face mapping: transformers' LlamaForCausalLM computes xirang's logits."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from xirang_llama.hf import LlamaHF
from xirang_llama.model import Llama, LlamaConfig

from xirang.lora import LoraSettings
from xirang_core.errors import ConfigError
from xirang_core.specs import HFInterop

transformers = pytest.importorskip("transformers")

GQA = LlamaConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, vocab_size=100)


def built(tied: bool) -> tuple[LlamaConfig, Llama]:
    torch.manual_seed(0)
    cfg = LlamaConfig(**{**vars(GQA), "tie_embeddings": tied, "max_seq_len": 32})
    return cfg, Llama(cfg).eval()


def logits_gap(model: Llama, hf: torch.nn.Module) -> float:
    x = torch.randint(0, GQA.vocab_size, (2, 32))
    with torch.no_grad():
        return (model(x) - hf.eval()(x).logits).abs().max().item()


def test_untied_loads_strictly_and_matches_logits() -> None:
    cfg, model = built(tied=False)
    hf_config, tensors = LlamaHF().to_hf(vars(cfg), model.state_dict())
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_config))
    hf.load_state_dict(tensors, strict=True)
    assert logits_gap(model, hf) < 1e-4


def test_tied_leaves_the_head_out_and_matches_logits(tmp_path: Path) -> None:
    """Tied: no lm_head tensor; transformers ties it to the embedding, strictly otherwise,
    both from a state dict and from a directory as `ckpt export` writes one."""
    from safetensors.torch import save_file

    cfg, model = built(tied=True)
    hf_config, tensors = LlamaHF().to_hf(vars(cfg), model.state_dict())
    assert "lm_head.weight" not in tensors and hf_config["tie_word_embeddings"] is True
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**hf_config))
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], [])
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    assert logits_gap(model, hf) < 1e-4
    (tmp_path / "config.json").write_text(json.dumps(hf_config))
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp_path / "model.safetensors")
    loaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path)
    assert logits_gap(model, loaded) < 1e-4


def shape(cfg: LlamaConfig) -> dict:
    """The settings a directory holds: all but where the run starts from and its adapters."""
    run_only = {"pretrained", *(f.name for f in fields(LoraSettings))}
    return {k: v for k, v in vars(cfg).items() if k not in run_only}


@pytest.mark.parametrize("tied", [False, True])
def test_from_hf_inverts_to_hf_exactly(tied: bool) -> None:
    cfg, model = built(tied)
    state = model.state_dict()
    settings, back = LlamaHF().from_hf(*LlamaHF().to_hf(vars(cfg), state))
    assert settings == shape(cfg)
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], v) for k, v in state.items())
    Llama.from_config(settings).load_state_dict(back, strict=True)


def test_reads_a_config_transformers_writes() -> None:
    """transformers 5 writes ``rope_parameters`` and ``dtype``; the mapping reads them."""
    cfg, model = built(tied=False)
    hf_config, tensors = LlamaHF().to_hf(vars(cfg), model.state_dict())
    written = transformers.LlamaConfig(**hf_config).to_dict()
    settings, _ = LlamaHF().from_hf(written, tensors)
    assert settings == shape(cfg)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"model_type": "mistral"}, "model_type"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_type"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"head_dim": 32}, "head_dim"),
    ],
)
def test_an_architecture_it_cannot_compute_is_a_config_error(change: dict, key: str) -> None:
    cfg, model = built(tied=False)
    hf_config, tensors = LlamaHF().to_hf(vars(cfg), model.state_dict())
    with pytest.raises(ConfigError, match=key):
        LlamaHF().from_hf({**hf_config, **change}, tensors)


def test_is_the_protocol() -> None:
    assert isinstance(LlamaHF(), HFInterop)
