"""A small snapshot of Python-like documents to train tokenizers on, and a run config over it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules

from xirang.storage.locate import tier_for

WORDS = ("value", "index", "name", "result", "count", "items", "key", "data", "naïve", "Σ")


def documents(n: int) -> list[dict[str, Any]]:
    """``n`` distinct Python-ish documents (non-ASCII included, so bytes != characters)."""
    docs = []
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        text = f"def {a}_{i}({b}):\n    return {b} * {i} + len('{a}')\n"
        docs.append({"text": text * (1 + i % 3)})
    return docs


@pytest.fixture
def code_snapshot(tmp_path: Path) -> str:
    """The root of a prepared dataset of 120 documents in 6 shards."""
    tier = tier_for(str(tmp_path / "code"))
    prepare(documents(120), tier, Rules(), PrepareSettings(shard_samples=20, progress=False), {})
    return tier.root


@pytest.fixture
def run_config(code_snapshot: str) -> Callable[..., dict[str, Any]]:
    """The config sections the data and tokenizer steps read, for ``tokenizer`` settings."""

    def make(tokenizer: dict[str, Any], vocab_size: int = 0) -> dict[str, Any]:
        return {
            "seed": 3,
            "storage": {"name": "local", "root": ""},
            "data": {"name": "snapshot", "uri": code_snapshot, "seq_len": 16, "val_fraction": 0.1},
            "tokenizer": tokenizer,
            "model": {"family": "gpt", "name": "gpt_tiny", "vocab_size": vocab_size},
        }

    return make
