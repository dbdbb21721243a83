"""What the training run asks of the data pipeline: a pinned snapshot, and its token batches."""

from __future__ import annotations

from typing import Any

from xirang_core.data import dataset
from xirang_core.data.order import Partition
from xirang_core.data.reader import ReadSettings
from xirang_core.data.tokenizer import open_tokenizer
from xirang_core.data.tokens import TokenBatches, TokenCorpus


def resolve_dataset(data: dict[str, Any], storage: dict[str, Any] | None = None) -> str:
    """Prepare the embedded corpus if needed, pin the snapshot into ``data``; returns its id.

    The launcher calls this once before writing config.yaml, so every worker reads the same
    snapshot and the run's config names it (``data.snapshot``)."""
    _, snap = dataset.resolve(data, storage)
    return snap.id


def run_batches(
    config: dict[str, Any], rank: int, world: int, micro: int, accum: int
) -> tuple[TokenBatches, TokenBatches]:
    """Training and held-out batches of one data-parallel rank, in the run's tokenizer."""
    data, seed = config["data"], config["seed"]
    cfg = dataset.check(data)
    read = ReadSettings(micro, seed, cfg.shuffle, cfg.shuffle_block, world, rank)
    reader = dataset.open_reader(data, config.get("storage"), read)
    try:
        corpus = TokenCorpus.open(
            reader, dataset.feature_root(), cfg.val_fraction, open_tokenizer(config)
        )
    finally:
        reader.close()
    part = Partition(micro, world, rank)
    return (
        TokenBatches(corpus, cfg.seq_len, part, accum, seed, "train"),
        TokenBatches(corpus, cfg.seq_len, part, 1, seed, "val"),
    )
