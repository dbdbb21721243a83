"""``python -m xirang`` (llama_tiny on the BPE tokenizer) trains end to end through the worker."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_llama_tiny_trains_and_samples(quick_default_run) -> None:
    _, run_dir = quick_default_run  # the embedded default, for 6 steps
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model"] == "llama_tiny" and summary["steps"] == 6
    assert 1_000_000 < summary["params"] < 3_000_000
    assert summary["tokenizer"] == "bpe" and summary["val_bpb"] > 0
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["sample"].startswith("def ")
