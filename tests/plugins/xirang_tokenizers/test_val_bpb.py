"""``val_bpb`` is lm-eval's ``bits_per_byte`` of the texts evaluated: their nats over ln 2 times
their own UTF-8 bytes. A bpe tokenizer trained on code cuts Chinese text into about one byte
per token and code into about three, so held-out Chinese text (``data.val``) put on the code
corpus's bytes per token would read about three times too few bits per byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules

from tests.conftest import QUICK, run_dirs
from xirang.storage.locate import tier_for

pytestmark = pytest.mark.slow

SENTENCE = "数据并行训练把一个批次分给每个工作进程，梯度在步末平均。"


def chinese_dataset(root: Path, n: int) -> tuple[str, list[str]]:
    """A prepared dataset of ``n`` Chinese documents: its root and the texts."""
    texts = [f"{SENTENCE * 3}{i}" for i in range(n)]
    tier = tier_for(str(root))
    settings = PrepareSettings(shard_samples=20, progress=False)
    prepare([{"text": t} for t in texts], tier, Rules(), settings, {})
    return tier.root, texts


def test_val_bpb_divides_by_the_evaluated_texts_own_bytes(
    run_xirang, code_snapshot: str, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    val_root, texts = chinese_dataset(tmp_path / "chinese", 60)
    data = ("data=snapshot", f"data.uri={code_snapshot}", f"data.val={val_root}")
    done = run_xirang("tokenizer=bpe", "tokenizer.vocab_size=512", *data, "data.seq_len=64",
                      *QUICK, "trainer.sample_tokens=0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = run_dirs(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    runtime = yaml.safe_load((run / "config.yaml").read_text())["runtime"]["tokenizer"]
    tokenizer = Tokenizer.from_file(runtime["path"])
    eos = runtime.get("eos_token")
    marker = 1 if eos else len(tokenizer.encode("\n\n", add_special_tokens=False).ids)
    # the held-out documents as tokenized and packed: each its own ids and the end marker
    tokens = sum(len(tokenizer.encode(t, add_special_tokens=False).ids) + marker for t in texts)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    # lm-eval's bits_per_byte: total nats / (ln 2 * total bytes), the nats val_loss per token
    direct = summary["val_loss"] * tokens / (math.log(2) * text_bytes)
    assert summary["val_bpb"] == pytest.approx(direct, rel=0.01)
    corpus_scale = summary["val_loss"] / math.log(2) / summary["bytes_per_token"]
    assert abs(corpus_scale - direct) > 0.5 * direct  # the old figure was far off
