"""The GPT family's Hugging Face mapping: transformers' GPT2LMHeadModel computes the same
logits from an export, and a run starts from an exported directory with model.pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from xirang_gpt.hf import GPTHF
from xirang_gpt.model import GPT, GPTConfig

from tests.conftest import run_dirs
from tests.conftest import xirang_cli as xirang

CFG = GPTConfig(n_layer=2, n_head=2, n_embd=32, max_seq_len=16, vocab_size=64)
SMALL = [
    "model=gpt_tiny",
    "tokenizer=bytes",
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.max_seq_len=32",
    "data.seq_len=32",
    "trainer.global_batch=4",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
]


def hf_logits(folder: Path, x: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    with torch.no_grad():
        return model(x).logits


def write_hf(config: dict, tensors: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture
def gpt() -> GPT:
    torch.manual_seed(0)
    model = GPT(CFG).eval()
    with torch.no_grad():  # norms away from their init, so a swapped name would show
        for name, p in model.named_parameters():
            if ".ln" in name or name.startswith("ln_f"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def test_transformers_computes_the_same_logits(gpt: GPT, tmp_path: Path) -> None:
    config, tensors = GPTHF().to_hf(vars(CFG), gpt.state_dict())
    x = torch.randint(0, CFG.vocab_size, (2, 16))
    with torch.no_grad():
        ours = gpt(x)
    assert torch.allclose(hf_logits(write_hf(config, tensors, tmp_path), x), ours, atol=1e-4)


def test_round_trip_gives_back_settings_and_every_tensor(gpt: GPT) -> None:
    shape = {k: v for k, v in vars(CFG).items() if k not in ("dropout", "pretrained")}
    settings, state = GPTHF().from_hf(*GPTHF().to_hf(vars(CFG), gpt.state_dict()))
    assert settings == shape
    own = gpt.state_dict()
    assert set(state) == set(own) - {"head.weight"}  # the tied copy comes with tok_emb
    assert all(torch.equal(state[k], own[k]) for k in state)


@settings(max_examples=15, deadline=None)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    head_dim=st.integers(1, 4),
    vocab=st.integers(2, 40),
    seq=st.integers(1, 12),
)
def test_every_shape_maps_there_and_back_exactly(
    layers: int, heads: int, head_dim: int, vocab: int, seq: int
) -> None:
    cfg = GPTConfig(layers, heads, heads * head_dim, seq, vocab)
    own = GPT(cfg).state_dict()
    config, tensors = GPTHF().to_hf(vars(cfg), own)
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (cfg.n_embd, 3 * cfg.n_embd)
    settings_back, state = GPTHF().from_hf(config, tensors)
    assert settings_back["n_embd"] == cfg.n_embd and settings_back["max_seq_len"] == seq
    assert all(torch.equal(state[k], own[k]) for k in state)


def test_what_the_gpt_cannot_hold_is_refused(gpt: GPT) -> None:
    config, tensors = GPTHF().to_hf(vars(CFG), gpt.state_dict())
    biased = {**tensors, "transformer.h.0.mlp.c_fc.bias": torch.ones(4 * CFG.n_embd)}
    with pytest.raises(ValueError, match=r"h\.0\.mlp\.c_fc\.bias is not zero"):
        GPTHF().from_hf(config, biased)
    with pytest.raises(ValueError, match="activation_function='gelu_new'"):
        GPTHF().from_hf({k: v for k, v in config.items() if k != "activation_function"}, tensors)


@pytest.mark.slow
def test_export_loads_in_transformers_and_starts_a_run(run_xirang, tmp_path: Path) -> None:
    """Train, export --format hf, compare transformers' logits with the checkpoint's in the
    GPT; then a run with model.pretrained=<export> and a zero learning rate keeps exactly the
    exported weights (so it started from them)."""
    first = run_xirang(*SMALL, "trainer.max_steps=3")
    assert first.returncode == 0, first.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    out = tmp_path / "hf-out"
    exported = xirang("ckpt", "export", "--format", "hf", str(run), str(out), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors"}
    assert json.loads((out / "generation_config.json").read_text())["top_k"] == 40
    weights = tmp_path / "step3.safetensors"
    plain = xirang("ckpt", "export", str(run), "-o", str(weights), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-3000:]

    settings = yaml.safe_load((run / "config.yaml").read_text())["model"]
    model = GPT.from_config({k: v for k, v in settings.items() if k not in ("family", "name")})
    model.load_state_dict(load_file(weights), strict=False)
    x = torch.randint(0, 256, (2, 32))
    with torch.no_grad():
        ours = model.eval()(x)
    assert torch.allclose(hf_logits(out, x), ours, atol=1e-4)

    zero_lr = ("optim.lr=0", "optim.min_lr=0", "trainer.max_steps=1")
    second = run_xirang(*SMALL, *zero_lr, f"model.pretrained={out}")
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = [r for r in run_dirs(tmp_path) if r != run]
    assert len(resumed) == 1
    again = tmp_path / "started.safetensors"
    assert xirang("ckpt", "export", str(resumed[0]), "-o", str(again), cwd=tmp_path).returncode == 0
    before, after = load_file(weights), load_file(again)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
