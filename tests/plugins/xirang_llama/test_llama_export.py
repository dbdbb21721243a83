"""The embedded default's way out and back in: a llama_tiny run with its BPE tokenizer exports
to a directory that transformers loads as it is (weights, config and tokenizer), with xirang's
logits, and a run started from that directory holds exactly the exported weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from xirang_llama.model import Llama

from tests.conftest import run_dirs
from tests.conftest import xirang_cli as xirang
from xirang_core.data.tokenizer import open_tokenizer

SMALL = [
    "model=llama_tiny",
    "tokenizer=bpe",
    "model.dim=32",
    "model.n_layers=2",
    "model.ffn_dim=64",
    "data.seq_len=32",
    "trainer.global_batch=4",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
]
TEXT = "def parse(self, text):\n    return [line.strip() for line in text.splitlines()]\n"


@pytest.mark.slow
def test_default_family_exports_weights_and_tokenizer_and_starts_again(
    run_xirang, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first = run_xirang(*SMALL, "trainer.max_steps=3")
    assert first.returncode == 0, first.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    out = tmp_path / "hf-out"
    exported = xirang("ckpt", "export", "--format", "hf", str(run), str(out), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}

    config = yaml.safe_load((run / "config.yaml").read_text())
    ids = open_tokenizer(config).encode(TEXT)
    assert AutoTokenizer.from_pretrained(out, local_files_only=True)(TEXT)["input_ids"] == ids

    weights = tmp_path / "step3.safetensors"
    assert xirang("ckpt", "export", str(run), "-o", str(weights), cwd=tmp_path).returncode == 0
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    ours = Llama.from_config(settings)
    ours.load_state_dict(load_file(weights), strict=False)
    x = torch.tensor([ids])
    theirs = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    with torch.no_grad():
        assert torch.allclose(theirs(x).logits, ours.eval()(x), atol=1e-4)

    zero_lr = ("optim.lr=0", "optim.min_lr=0", "trainer.max_steps=1")
    second = run_xirang(*SMALL, *zero_lr, f"model.pretrained={out}")
    assert second.returncode == 0, second.stderr[-3000:]
    [started] = [r for r in run_dirs(tmp_path) if r != run]
    again = tmp_path / "started.safetensors"
    assert xirang("ckpt", "export", str(started), "-o", str(again), cwd=tmp_path).returncode == 0
    before, after = load_file(weights), load_file(again)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
