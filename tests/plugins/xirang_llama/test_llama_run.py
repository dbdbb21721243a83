"""``python -m xirang`` (llama_tiny on the BPE tokenizer) trains end to end through the worker."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QUICK, run_dirs


@pytest.mark.slow
def test_llama_tiny_trains_and_samples(run_xirang, tmp_path) -> None:
    result = run_xirang(*QUICK)  # the embedded default
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model"] == "llama_tiny" and summary["steps"] == 6
    assert 1_000_000 < summary["params"] < 3_000_000
    assert summary["tokenizer"] == "bpe" and summary["val_bpb"] > 0
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["sample"].startswith("def ")
