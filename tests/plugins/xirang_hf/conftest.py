"""Tiny Hugging Face configs written locally (nothing downloaded): a Llama-shaped one with
grouped-query attention and an untied head, and a GPT-2 with a tied head and biases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: the run settings every test here shares: 16-token sequences, 8 per step
TINY_RUN = [
    "tokenizer=bytes",  # 256 ids: the tiny configs here have 288
    "data.seq_len=16",
    "trainer.global_batch=8",
    "trainer.max_steps=10",
    "optim.warmup_steps=2",
]


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig

    folder = tmp_path_factory.mktemp("llama")
    LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=288,
        max_position_embeddings=32,
        tie_word_embeddings=False,
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import GPT2Config

    folder = tmp_path_factory.mktemp("gpt2")
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # runs compare exactly
    GPT2Config(
        n_embd=32, n_layer=2, n_head=2, vocab_size=288, n_positions=32, **no_dropout
    ).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def hf_config() -> Callable[..., dict[str, Any]]:
    """``hf_config(folder, *overrides)``: the composed, validated config of a ``model=hf`` run
    on ``folder``."""
    from xirang_core.config import compose

    def composed(folder: Path, *overrides: str) -> dict[str, Any]:
        return compose(["model=hf", f"model.config={folder}", *TINY_RUN, *overrides])

    return composed
