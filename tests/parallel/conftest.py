"""A tiny GPT config shared by the parallel tests (2 layers, 2 heads: splits 2 ways)."""

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


@pytest.fixture(scope="session")
def tiny_config() -> dict[str, Any]:
    from xirang_core.config import compose as compose_config

    return compose_config(TINY)
