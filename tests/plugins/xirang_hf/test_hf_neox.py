"""A GPT-NeoX (Pythia) folder, whose checkpoint names the head ``embed_out`` as the original
Pythia weights do, loads and trains with ``model=hf``: transformers' own renames apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.conftest import run_dirs
from tests.plugins.xirang_hf.conftest import TINY_RUN
from xirang_core.checkpoint.pretrained import load_pretrained
from xirang_core.plugins import get_registry


@pytest.fixture(scope="module")
def pythia_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPTNeoXForCausalLM as transformers saves it (random weights, seed 0)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    folder = tmp_path_factory.mktemp("pythia")
    config = GPTNeoXConfig(
        vocab_size=288,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    GPTNeoXForCausalLM(config).save_pretrained(folder)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as saved:
        assert "embed_out.weight" in saved.keys()  # noqa: SIM118 (Pythia's own name)
    return folder


def test_pythia_weights_load_with_transformers_logits(pythia_dir: Path, hf_config) -> None:
    from transformers import GPTNeoXForCausalLM
    from xirang_hf.model import HFCausalLM

    config = hf_config(pythia_dir, f"model.pretrained={pythia_dir}")
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    ours = HFCausalLM.from_config(settings).eval()
    load_pretrained(ours, config, get_registry())
    theirs = GPTNeoXForCausalLM.from_pretrained(pythia_dir, local_files_only=True).eval()
    x = torch.randint(0, 288, (2, 16))
    assert torch.equal(ours(x), theirs(x).logits)


@pytest.mark.slow
def test_pythia_folder_trains(pythia_dir: Path, run_xirang, tmp_path: Path) -> None:
    done = run_xirang(
        "model=hf",
        f"model.pretrained={pythia_dir}",
        *TINY_RUN,
        "trainer.max_steps=2",
        "trainer.sample_tokens=0",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["final_loss"] > 0
