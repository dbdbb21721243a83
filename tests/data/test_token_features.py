"""Tokens in the feature cache: keyed by tokenizer, stored in the smallest dtype, with the
corpus's text bytes per token (what turns a loss into bits per byte)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from xirang_tokenizers.bytes import ByteTokenizer

from tests.data.conftest import Make, samples
from xirang_core.data.features import token_dtype, tokenize
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.data.training import resolve_dataset, run_batches
from xirang_core.plugins import get_registry
from xirang_core.train.report import bits_per_byte

BYTES = {"name": "bytes", "separator": "\n\n"}
BPE = {"name": "bpe", "vocab_size": 300, "min_frequency": 2}


def corpus(uri: str, tokenizer: dict):
    """The training corpus of a run over ``uri`` with ``tokenizer``, as a worker opens it."""
    config = {
        "seed": 1,
        "storage": {"name": "local", "root": ""},
        "data": {"name": "snapshot", "uri": uri, "seq_len": 8, "val_fraction": 0.1},
        "tokenizer": dict(tokenizer),
        "model": {"family": "gpt", "vocab_size": 0},
    }
    resolve_dataset(config["data"], config["storage"])
    resolve_tokenizer(config, get_registry())
    return run_batches(config, 0, 1, 2, 1)[0].corpus


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(256, np.uint8), (257, np.uint16), (65_536, np.uint16), (65_537, np.uint32)],
)
def test_tokens_take_the_smallest_unsigned_dtype_holding_the_vocabulary(vocab, dtype) -> None:
    assert token_dtype(vocab) == np.dtype(dtype)


def test_each_tokenizer_has_its_own_features_in_its_dtype(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=80, per_shard=20)
    by_bytes, by_bpe = corpus(tier.root, BYTES), corpus(tier.root, BPE)
    assert by_bytes.features.tokens.dtype == np.uint8
    assert by_bpe.features.tokens.dtype == np.uint16
    assert len(by_bpe.features.tokens) < len(by_bytes.features.tokens)
    keys = {tokenize(c.tokenizer)[0].key(snap.id) for c in (by_bytes, by_bpe)}
    other = tokenize(ByteTokenizer("\n"))[0].key(snap.id)  # same name, other ids
    assert len(keys | {other}) == 3


def test_bytes_per_token_is_the_texts_utf8_bytes_over_the_stored_tokens(make_dataset) -> None:
    tier, _ = make_dataset(n=80, per_shard=20)
    text_bytes = sum(len(s["text"].encode()) for s in samples(80))
    for tokenizer in (BYTES, BPE):
        features = corpus(tier.root, tokenizer).features
        assert features.text_bytes == text_bytes
        assert features.bytes_per_token == pytest.approx(text_bytes / len(features.tokens))
    bytes_only = corpus(tier.root, BYTES).features  # markers are tokens but not text
    assert len(bytes_only.tokens) == text_bytes + 2 * 80


def test_bits_per_byte_is_the_loss_in_bits_over_bytes_per_token() -> None:
    assert bits_per_byte(math.log(2) * 3.0, 1.5) == pytest.approx(2.0)
    assert bits_per_byte(2.0, 0.0) is None  # unknown text bytes: no figure, not a wrong one
