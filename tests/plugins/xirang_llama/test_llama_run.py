"""``python -m xirang model=llama_tiny`` trains end to end through the worker."""

from __future__ import annotations

import json

import pytest

from tests.conftest import QUICK, run_dirs


@pytest.mark.slow
def test_llama_tiny_trains_and_samples(run_xirang, tmp_path) -> None:
    # 256 fits today's byte tokens; with a tokenizer group vocab_size 0 takes its vocabulary
    result = run_xirang("model=llama_tiny", "model.vocab_size=256", *QUICK)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["model"] == "llama_tiny" and summary["steps"] == 6
    assert 1_000_000 < summary["params"] < 3_000_000
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["sample"].startswith("def ")
