"""The training run's batches: from the pinned snapshot, deterministic per step and rank."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from xirang_data import token_shards
from xirang_data.training import resolve_dataset, run_batches

from tests.data.conftest import Make, samples
from xirang_core.data.order import EpochOrder
from xirang_core.errors import ConfigError, DataError


def config(uri: str, **data) -> dict:
    return {
        "seed": 7,
        "storage": {"name": "local", "root": ""},
        "tokenizer": {"name": "bytes", "separator": "\n\n"},
        "data": {"name": "snapshot", "uri": uri, "seq_len": 16, "val_fraction": 0.1, **data},
    }


def test_batches_depend_only_on_step_and_rank(make_dataset: Make) -> None:
    tier, _ = make_dataset(n=120, per_shard=20)
    cfg = config(tier.root)
    train, _ = run_batches(cfg, rank=0, world=2, micro=4, accum=2)
    again, _ = run_batches(config(tier.root), rank=0, world=2, micro=4, accum=2)
    x, y = train.get(5, 1)
    assert x.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x, again.get(5, 1)[0])
    assert not torch.equal(x, train.get(6, 1)[0])


def test_a_step_reads_the_same_rows_on_any_number_of_ranks(make_dataset: Make) -> None:
    """Resuming on another world size continues the same trajectory: the global batch of a
    step (documents and windows) does not depend on how it is split over ranks."""
    tier, _ = make_dataset(n=120, per_shard=20)

    def global_rows(world: int, step: int) -> list[list[int]]:
        micro, accum = 8 // world // 2, 2
        rows = []
        for rank in range(world):
            train, _ = run_batches(config(tier.root), rank, world, micro, accum)
            rows += [r for m in range(accum) for r in train.get(step, m)[0].tolist()]
        return sorted(rows)

    for step in (1, 5):
        assert global_rows(1, step) == global_rows(2, step) == global_rows(4, step)


def test_an_epoch_of_rows_packs_every_training_token_once_in_the_epoch_order(
    make_dataset: Make,
) -> None:
    """Rows run on across document boundaries: one epoch's rows, put back in packing order,
    laid end to end are the training documents (each with its end marker) in the reader's
    epoch order; the epoch reads them shuffled inside their blocks, each once."""
    tier, snap = make_dataset(n=100, per_shard=20)
    train, _ = run_batches(config(tier.root), 0, 1, 5, 1)
    source = train.sources[0].source
    rows = source.rows_per_epoch
    packed = np.array([source.packed_row(0, r) for r in range(rows)])
    assert sorted(packed) == list(range(rows)) and not np.array_equal(packed, np.arange(rows))
    stream = np.concatenate(train.rows(np.arange(rows))[np.argsort(packed)].tolist())
    order = EpochOrder(tuple(s.samples for s in snap.shards), 7, 0, True, 4).samples
    texts = {i: s["text"].encode() + b"\n\n" for i, s in enumerate(samples(100))}
    expected = b"".join(texts[int(i)] for i in order if i < source.n_train)
    assert rows == len(expected) // 17 and bytes(stream.astype(np.uint8)) == expected[: rows * 17]
    next_epoch = train.rows(np.arange(rows, rows + 3))
    assert not np.array_equal(next_epoch, train.rows(np.arange(3)))  # reshuffled, not repeated


def test_token_shards_are_written_once(make_dataset: Make, monkeypatch) -> None:
    tier, _ = make_dataset(n=60, per_shard=20)
    run_batches(config(tier.root), 0, 1, 2, 1)
    calls = []
    real = token_shards.tokenize_snapshot
    monkeypatch.setattr(token_shards, "tokenize_snapshot", lambda *a: calls.append(1) or real(*a))
    run_batches(config(tier.root), 0, 1, 2, 1)
    assert calls == []


def test_the_config_records_the_snapshot_and_a_pin_is_enforced(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=30)
    data = config(tier.root)["data"]
    assert resolve_dataset(data) == snap.id and data["snapshot"] == snap.id
    with pytest.raises(DataError, match="not in"):
        resolve_dataset(config(tier.root, snapshot="fedcba9876543210")["data"])
    with pytest.raises(ConfigError, match=r"data\.bogus"):
        resolve_dataset(config(tier.root, bogus=1)["data"])


@pytest.mark.slow
def test_the_embedded_run_records_its_snapshot(quick_default_run) -> None:
    _, run = quick_default_run
    summary = yaml.safe_load((run / "summary.json").read_text())
    pinned = yaml.safe_load((run / "config.yaml").read_text())["data"]["snapshot"]
    assert summary["data_snapshot"] == pinned and len(pinned) == 16
    assert sum(summary["data_tokens"].values()) == summary["tokens"]  # per source, all of them
