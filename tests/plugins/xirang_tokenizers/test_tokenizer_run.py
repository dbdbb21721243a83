"""A run trained in bpe tokens end to end: the tokenizer trained once before the workers, bits
per byte beside every loss, and a sample decoded from the run's own vocabulary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK, run_dirs

pytestmark = pytest.mark.slow


def test_a_bpe_run_reports_bits_per_byte_and_a_decoded_sample(
    run_xirang, code_snapshot: str, tmp_path: Path
) -> None:
    data = ("data=snapshot", f"data.uri={code_snapshot}", "data.seq_len=32")
    done = run_xirang("tokenizer=bpe", "tokenizer.vocab_size=512", *data, *QUICK)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (done.stdout + done.stderr).count("training the bpe tokenizer") == 1
    [run] = run_dirs(tmp_path)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["vocab_size"] == 512  # gpt_tiny's 0: the tokenizer's
    assert Path(config["runtime"]["tokenizer"]["path"]).is_file()
    summary = json.loads((run / "summary.json").read_text())
    per_token = summary["bytes_per_token"]
    assert summary["tokenizer"] == "bpe" and per_token > 1.5  # merges: tokens span bytes
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 4, 6]
    for record in records:
        assert record["bpb"] == pytest.approx(record["loss"] / math.log(2) / per_token, abs=1e-4)
    held_out = summary["val_bytes_per_token"]  # of the held-out rows scored, not the corpus
    assert held_out == pytest.approx(per_token, rel=0.15)  # the same kind of text
    expected = summary["val_loss"] / math.log(2) / held_out
    assert summary["val_bpb"] == pytest.approx(expected, abs=1e-4)
    assert "bits per byte, tokenizer bpe" in done.stdout
    assert summary["sample"].startswith("def ") and len(summary["sample"]) > len("def ")
    assert summary["sample"] in done.stdout
