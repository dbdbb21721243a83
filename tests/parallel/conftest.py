"""Tiny GPT and Llama configs shared by the parallel tests (2 layers: they split 2 ways)."""

from __future__ import annotations

from typing import Any

import pytest

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.max_seq_len=16",
    "data.seq_len=16",
    "trainer.global_batch=8",
    "trainer.max_steps=10",
    "trainer.grad_clip=1.0",
    "optim.warmup_steps=2",
]
#: a Llama with grouped-query attention (4 heads share 2 key/value heads) and tied embeddings
TINY_LLAMA = [
    "model=llama_tiny",
    "model.dim=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_dim=64",
    "model.vocab_size=256",
    "model.max_seq_len=16",
    "model.tie_embeddings=true",
    *TINY[4:],
]


@pytest.fixture(scope="session")
def tiny_config() -> dict[str, Any]:
    from xirang_core.config import compose as compose_config

    return compose_config(TINY)


@pytest.fixture(scope="session")
def tiny_llama_config() -> dict[str, Any]:
    from xirang_core.config import compose as compose_config

    return compose_config(TINY_LLAMA)
