"""Token shards: a derived snapshot per (snapshot, tokenizer), in the smallest dtype, with the
corpus's text bytes per token, written in parallel by `xirang data tokenize`, and refused when
they are not the run tokenizer's."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from xirang_data import token_shards
from xirang_data.cli import main
from xirang_data.snapshot import Snapshot, list_ids, load, save
from xirang_data.token_shards import find, token_dtype, tokens_tier, write_token_shard
from xirang_data.training import resolve_dataset, run_batches
from xirang_tokenizers.bytes import ByteTokenizer

from tests.data.conftest import Make, samples
from xirang.specs import thaw
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.errors import ConfigError, DataError
from xirang_core.plugins import get_registry
from xirang_core.train.report import bits_per_byte

BYTES = {"name": "bytes", "separator": "\n\n"}
BPE = {"name": "bpe", "vocab_size": 300, "min_frequency": 2}


def run_config(uri: str, tokenizer: dict) -> dict:
    return {
        "seed": 1,
        "storage": {"name": "local", "root": ""},
        "data": {"name": "snapshot", "uri": uri, "seq_len": 8, "val_fraction": 0.1},
        "tokenizer": dict(tokenizer),
        "model": {"family": "gpt", "vocab_size": 0},
    }


def launched(uri: str, tokenizer: dict) -> dict:
    """A run's config as the launcher leaves it: snapshot, tokenizer and token shards pinned."""
    config = run_config(uri, tokenizer)
    resolve_dataset(config["data"], config["storage"])
    return thaw(resolve_tokenizer(config, get_registry())[1])  # a test's copy to change


def token_snapshot(uri: str, tokenizer: dict) -> Snapshot:
    config = launched(uri, tokenizer)
    return load(tokens_tier(_tier(uri)), config["runtime"]["tokens"][0])


def _tier(uri: str):
    from xirang.storage.locate import tier_for

    return tier_for(uri)


@pytest.mark.parametrize(
    ("vocab", "dtype"),
    [(256, np.uint8), (257, np.uint16), (65_536, np.uint16), (65_537, np.uint32)],
)
def test_tokens_take_the_smallest_unsigned_dtype_holding_the_vocabulary(vocab, dtype) -> None:
    assert token_dtype(vocab) == np.dtype(dtype)


def test_each_tokenizer_has_its_own_token_snapshot_in_its_dtype(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=80, per_shard=20)
    by_bytes, by_bpe = token_snapshot(tier.root, BYTES), token_snapshot(tier.root, BPE)
    assert (by_bytes.lineage["dtype"], by_bpe.lineage["dtype"]) == ("uint8", "uint16")
    assert by_bytes.lineage["source"] == by_bpe.lineage["source"] == snap.id
    assert sum(by_bpe.lineage["shard_tokens"]) < sum(by_bytes.lineage["shard_tokens"])
    assert len(by_bytes.shards) == len(snap.shards) and by_bytes.id != by_bpe.id
    assert find(tier, snap, ByteTokenizer("\n")) is None  # same name, other ids: not reused


def test_bytes_per_token_is_the_texts_utf8_bytes_over_the_stored_tokens(make_dataset) -> None:
    tier, _ = make_dataset(n=80, per_shard=20)
    text_bytes = sum(len(s["text"].encode()) for s in samples(80))
    for tokenizer in (BYTES, BPE):
        train, _ = run_batches(launched(tier.root, tokenizer), 0, 1, 2, 1)
        lineage = train.sources[0].source.snap.lineage
        assert lineage["text_bytes"] == text_bytes
        assert train.bytes_per_token == pytest.approx(text_bytes / sum(lineage["shard_tokens"]))
    bytes_only = token_snapshot(tier.root, BYTES).lineage  # markers are tokens but not text
    assert sum(bytes_only["shard_tokens"]) == text_bytes + 2 * 80


def test_bits_per_byte_is_the_loss_in_bits_over_bytes_per_token() -> None:
    assert bits_per_byte(math.log(2) * 3.0, 1.5) == pytest.approx(2.0)
    assert bits_per_byte(2.0, 0.0) is None  # unknown text bytes: no figure, not a wrong one


def test_the_tokenize_command_writes_in_worker_processes_what_a_run_would(
    make_dataset: Make, capsys
) -> None:
    tier, snap = make_dataset(n=80, per_shard=10)
    argv = ["tokenize", tier.root, "--tokenizer", "bytes", "--workers", "2", "--json"]
    assert main(argv) == 0
    written = json.loads(capsys.readouterr().out)
    assert written["source"] == snap.id and written["tokens"] > 80
    assert token_snapshot(tier.root, BYTES).id == written["snapshot"]  # found, not rebuilt
    assert list_ids(tokens_tier(tier)) == [written["snapshot"]]


def test_a_large_untokenised_snapshot_names_the_command(make_dataset: Make, monkeypatch) -> None:
    tier, snap = make_dataset(n=40)
    monkeypatch.setattr(token_shards, "AUTO_TOKENIZE_BYTES", 0)
    command = rf"xirang data tokenize {tier.root} --snapshot {snap.id} --tokenizer bytes"
    with pytest.raises(ConfigError, match=command):
        launched(tier.root, BYTES)


def test_token_shards_of_another_tokenizer_are_refused_with_the_rebuild_command(
    make_dataset: Make,
) -> None:
    tier, _ = make_dataset(n=40)
    config = launched(tier.root, BYTES)
    config["tokenizer"]["separator"] = "\n"  # the run's tokenizer now has another hash
    config["runtime"]["tokenizer"] = {}
    with pytest.raises(DataError, match=r"hash .*rebuild it with `xirang data tokenize"):
        run_batches(config, 0, 1, 2, 1)


def test_token_shards_too_narrow_for_the_vocabulary_are_refused(make_dataset: Make) -> None:
    """A token shard stored as uint8 for the bpe tokenizer's 300 ids would wrap ids >= 256."""
    tier, _ = make_dataset(n=40)
    config = launched(tier.root, BPE)
    good = load(tokens_tier(tier), config["runtime"]["tokens"][0])
    narrow = Snapshot(good.schema, good.shards, lineage={**good.lineage, "dtype": "uint8"})
    save(tokens_tier(tier), narrow)
    config["runtime"]["tokens"] = [narrow.id]
    with pytest.raises(DataError, match=r"uint8, which cannot hold .*xirang data tokenize"):
        run_batches(config, 0, 1, 2, 1)
    table = token_shards.token_table([[1, 2, 3]], np.dtype(np.uint8))  # the shard itself narrow
    info = write_token_shard(tokens_tier(tier), table)
    lineage = {**good.lineage, "shard_tokens": [3]}
    save(tokens_tier(tier), Snapshot(good.schema, (info,), lineage=lineage))
    config["runtime"]["tokens"] = [Snapshot(good.schema, (info,), lineage=lineage).id]
    config["data"]["val_fraction"] = 0.0
    config["data"]["seq_len"] = 2
    with pytest.raises(DataError, match=r"uint8, which cannot hold"):
        run_batches(config, 0, 1, 1, 1)[0].get(1)


def test_an_interrupted_tokenize_leaves_nothing_a_run_reads(make_dataset: Make, monkeypatch):
    """Shards land by atomic renames and the manifest goes last: a crash in the middle leaves
    no token snapshot, so the next run tokenises again rather than reading half of one."""
    tier, _ = make_dataset(n=60, per_shard=10)
    real, done = token_shards.tokenize_shard, []

    def crash_on_the_third(*args):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(1)
        return real(*args)

    monkeypatch.setattr(token_shards, "tokenize_shard", crash_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        launched(tier.root, BYTES)
    assert list_ids(tokens_tier(tier)) == []
    assert not [key for key in tokens_tier(tier).list("shards") if "partial" in key]
    monkeypatch.setattr(token_shards, "tokenize_shard", real)
    assert len(token_snapshot(tier.root, BYTES).shards) == 6
