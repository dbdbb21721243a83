"""What the training run asks of the data pipeline: pinned snapshots, their token shards, and
the token batches of one rank streamed from them; :class:`SnapshotDataset` is the
:class:`xirang.data.Dataset` behind ``data=stdlib``, ``snapshot`` and ``mixture``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from xirang import ConfigError
from xirang.data import FsspecTier, NamedSource, Partition, TokenBatches, open_tokenizer, tier_for
from xirang.specs import DataPins, TextCorpus, Tokenizer, thaw
from xirang_data import corpus, dataset, token_shards
from xirang_data.snapshot import Snapshot, load
from xirang_data.stream import HELD_OUT_ALL, SourceRead, TokenSource


def resolve_dataset(data: dict[str, Any], storage: dict[str, Any] | None = None) -> str:
    """Prepare the embedded corpus if needed, pin the snapshot into ``data``; returns its id.

    The launcher calls this once before writing config.yaml, so every worker reads the same
    snapshot and the run's config names it (``data.snapshot``)."""
    _, snap = dataset.resolve(data, storage)
    return snap.id


def pin_tokens(config: Mapping[str, Any], tokenizer: Tokenizer, prepared: bool = False) -> DataPins:
    """The token snapshot of every source in the run's tokenizer, for ``runtime.tokens``
    (``prepared``: the launch pinned ``data`` already; else the pins name it too). The
    embedded corpus and small snapshots are tokenised here once; a larger snapshot without
    token shards is a :class:`ConfigError` naming the command."""
    data, storage = thaw(config["data"]), config.get("storage")
    if not prepared:
        dataset.resolve(data, storage)
    runtime = config.get("runtime") or {}
    recipe = {"tokenizer": config["tokenizer"], "runtime": {"tokenizer": runtime.get("tokenizer")}}
    held_out = dataset.held_out_source(data)
    ids = []
    for source in [*dataset.sources(data), *([held_out] if held_out else [])]:
        tier = tier_for(source.uri, storage)
        snap = load(tier, source.snapshot)
        found = token_shards.find(tier, snap, tokenizer)
        if found is None:
            small = snap.bytes <= token_shards.AUTO_TOKENIZE_BYTES or data.get("name") == "stdlib"
            if not small:
                command = token_shards.rebuild_command(source.uri, snap.id, tokenizer.name)
                raise ConfigError(
                    f"data.uri={source.uri}: snapshot {snap.id} ({snap.bytes / 2**20:.0f} MiB) "
                    f"has no token shards for tokenizer={tokenizer.name}; make them once with "
                    f"`{command}`"
                )
            found = tokenize_at_launch(tier, snap, tokenizer, recipe)
        ids.append(found.id)
    pinned: dict[str, Any] = {}
    if held_out is not None:  # the separate held-out dataset's tokens, after the sources'
        pinned["val_tokens"] = ids.pop()
    pinned["tokens"] = ids
    return DataPins(None if prepared else data, pinned, tuple(ids))


def tokenize_at_launch(
    tier: FsspecTier, snap: Snapshot, tokenizer: Tokenizer, recipe: dict[str, Any]
) -> Snapshot:
    """The launch's tokenising of a small snapshot, said and shown as it goes (a first run
    spends a minute here): a line naming what, a bar over its shards on a terminal, the time."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    console.print(
        f"tokenizing snapshot {snap.id} ({len(snap.shards)} shards, {snap.bytes / 2**20:.1f} MiB) "
        f"with tokenizer={tokenizer.name}; once per snapshot and tokenizer"
    )
    started = time.perf_counter()
    found = token_shards.tokenize_snapshot(tier, snap, tokenizer, recipe, progress=True)
    console.print(f"tokenized snapshot {snap.id} in {time.perf_counter() - started:.1f} s")
    return found


def run_batches(
    config: Mapping[str, Any], rank: int, world: int, micro: int, accum: int
) -> tuple[TokenBatches, TokenBatches]:
    """Training and held-out batches of one data-parallel rank, in the run's tokenizer."""
    data, seed, storage = config["data"], config["seed"], config.get("storage")
    cfg = dataset.check(data)
    tokenizer = open_tokenizer(config)
    runtime = config.get("runtime") or {}
    if not runtime.get("tokens"):  # a config no launch pinned (a tool's, a test's): pin it here
        pins = pin_tokens(config, tokenizer)
        data, runtime = pins.data or data, {**runtime, **pins.runtime}
    pinned = runtime["tokens"]
    read = SourceRead(
        cfg.seq_len + 1,
        seed,
        cfg.shuffle,
        cfg.shuffle_block,
        cfg.val_fraction,
        tokenizer.vocab_size,
    )
    named: list[NamedSource] = []
    for source, token_id in zip(dataset.sources(data), pinned, strict=True):
        name = source.uri.rstrip("/").rsplit("/", 1)[-1]
        if any(n.name == name for n in named):  # two roots of one name: say which is which
            name = f"{name}#{len(named)}"
        stream = _stream(source, token_id, cfg, read, tokenizer, storage)
        named.append(NamedSource(name, stream, source.weight))
    part = Partition(micro, world, rank)
    held_out = dataset.held_out_source(data)
    if held_out is None:
        val = TokenBatches(named, part, 1, seed, "val", tokenizer, cfg.document_mask)
    else:  # every document of the separate dataset is held out
        whole = replace(read, val_fraction=HELD_OUT_ALL)
        stream = _stream(held_out, runtime["val_tokens"], cfg, whole, tokenizer, storage)
        val_source = NamedSource(held_out.uri.rstrip("/").rsplit("/", 1)[-1], stream)
        val = TokenBatches([val_source], part, 1, seed, "val", tokenizer, cfg.document_mask)
    train = TokenBatches(named, part, accum, seed, "train", tokenizer, cfg.document_mask)
    return train, val


def _stream(
    source: dataset.Source,
    token_id: str,
    cfg: dataset.DataConfig,
    read: SourceRead,
    tokenizer: Tokenizer,
    storage: dict[str, Any] | None,
) -> TokenSource:
    """The token rows of one pinned source, read as ``read`` says."""
    tier = tier_for(source.uri, storage)
    snap = token_shards.open_tokens(tier, token_id, tokenizer, source.uri)
    rebuild = token_shards.rebuild_command(source.uri, source.snapshot, tokenizer.name)
    origin = token_shards.tokens_tier(tier)
    settings = dataset.tier_settings(cfg, origin.root)
    return TokenSource(snap, origin, settings, replace(read, rebuild=rebuild))


class SnapshotDataset:
    """The snapshot pipeline as the run's :class:`xirang.data.Dataset`: the launch pins the
    snapshots once (:meth:`prepare`), and what it pinned is not looked up again for the
    tokenizer's text or the token shards; workers stream their rank's rows."""

    def __init__(self) -> None:
        self.prepared = False

    def prepare(self, config: Mapping[str, Any]) -> DataPins:
        data = thaw(config["data"])
        snapshot = resolve_dataset(data, config.get("storage"))
        self.prepared = True
        return DataPins(data, ids=(snapshot,))

    def text_corpus(self, config: Mapping[str, Any]) -> TextCorpus:
        return corpus.text_corpus(config, self.prepared)

    def pin_tokens(self, config: Mapping[str, Any], tokenizer: Tokenizer) -> DataPins:
        return pin_tokens(config, tokenizer, self.prepared)

    def batches(
        self, config: Mapping[str, Any], rank: int, world: int, micro: int, accum: int
    ) -> tuple[TokenBatches, TokenBatches]:
        return run_batches(config, rank, world, micro, accum)
