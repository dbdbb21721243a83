"""Mixtures: weighted snapshots, each global row's source fixed by its number."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_data.corpus import text_corpus
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules
from xirang_data.training import SnapshotDataset, run_batches

from tests.data.conftest import Make
from xirang.storage.locate import tier_for
from xirang_core.data.mixture import CHUNK, Schedule
from xirang_core.data.tokenizer import prepare_tokenizer
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

weights = st.lists(st.floats(0.05, 10.0), min_size=1, max_size=5)


@settings(max_examples=30, deadline=None)
@given(weights=weights, seed=st.integers(0, 2**31), rows=st.integers(20 * CHUNK, 60 * CHUNK))
def test_each_sources_share_is_its_weight_within_one_percent(weights, seed, rows) -> None:
    counts = Schedule(tuple(weights), seed).counts(rows)
    assert counts.sum() == rows
    share = counts / rows
    assert np.all(np.abs(share - np.asarray(weights) / sum(weights)) < 0.01)


@settings(max_examples=20, deadline=None)
@given(weights=weights, seed=st.integers(0, 2**31), start=st.integers(0, 5 * CHUNK))
def test_a_rows_place_in_its_source_follows_from_the_row_alone(weights, seed, start) -> None:
    """Rows of each source are numbered 0, 1, 2 ... in order, with none skipped or repeated:
    reading from any row on (a resume) continues each source where it was."""
    schedule = Schedule(tuple(weights), seed)
    rows = np.arange(start + 2 * CHUNK)
    source, within = schedule.locate(rows)
    for s in range(len(weights)):
        assert np.array_equal(within[source == s], np.arange((source == s).sum()))
    tail = Schedule(tuple(weights), seed).locate(rows[start:])
    assert np.array_equal(tail[0], source[start:]) and np.array_equal(tail[1], within[start:])


def mixture(code: str, prose: str, **data) -> dict:
    sources = [{"uri": code, "weight": 0.7}, {"uri": prose, "weight": 0.3}]
    return {
        "seed": 3,
        "storage": {"name": "local", "root": ""},
        "tokenizer": {"name": "bytes", "separator": "\n\n"},
        "data": {"name": "mixture", "sources": sources, "seq_len": 8, "val_fraction": 0.0, **data},
    }


def test_a_mixture_trains_on_each_source_by_its_weight(make_dataset: Make, tmp_path) -> None:
    code, _ = make_dataset(n=60, per_shard=20, root=str(tmp_path / "code"))
    prose, _ = make_dataset(n=40, per_shard=20, root=str(tmp_path / "prose"))
    train, _ = run_batches(mixture(code.root, prose.root), 0, 1, 10, 1)
    steps = 2 * CHUNK // 10
    seen = train.tokens_seen(steps)
    assert seen == {"code": 0.7 * steps * 10 * 8, "prose": 0.3 * steps * 10 * 8}
    x, _ = train.get(7)
    again, _ = run_batches(mixture(code.root, prose.root), 1, 2, 5, 1)  # other ranks, resumed
    assert torch.equal(x[5:], again.get(7)[0])
    with pytest.raises(ConfigError, match=r"data\.sources\[1\]"):
        run_batches(mixture(code.root, ""), 0, 1, 2, 1)


def test_a_mixtures_bpe_learns_from_every_source_by_weight(tmp_path) -> None:
    """Each source's words become tokens, the corpus holds each source by its weight (the small
    heavy one repeated), and the cache key changes with any source's snapshot or weight."""
    settings_ = PrepareSettings(shard_samples=20, progress=False)
    roots = []
    for name, word, n in (("code", "quokka", 60), ("prose", "zebra", 40)):
        texts = [{"text": f"{word} {word} {i}"} for i in range(n)]
        tier = tier_for(str(tmp_path / name))
        prepare(texts, tier, Rules(), settings_, {"source": name})
        roots.append(tier.root)
    config = mixture(*roots)
    config["data"]["sources"][1]["weight"] = 0.5  # shares 7/12 and 5/12 of 100 documents
    config["tokenizer"] = {"name": "bpe", "vocab_size": 300, "min_frequency": 2}
    config["model"] = {"family": "gpt", "vocab_size": 0}
    corpus = text_corpus(config)
    texts = [t for batch in corpus.batches() for t in batch]
    assert corpus.documents == len(texts) == 100
    assert (sum("quokka" in t for t in texts), sum("zebra" in t for t in texts)) == (58, 42)
    pinned = SnapshotDataset().prepare(config).data  # as the launch pins the mixture
    snapshots = [s["snapshot"] for s in pinned["sources"]]
    assert all(s in corpus.snapshot for s in snapshots)
    config["data"]["sources"][1]["weight"] = 0.3
    assert text_corpus(config).snapshot != corpus.snapshot
    tokenizer = prepare_tokenizer(config, get_registry())
    for word in ("quokka", "zebra"):
        assert len(tokenizer.encode_batch([word])[0]) <= 2  # the word (and the end marker)
