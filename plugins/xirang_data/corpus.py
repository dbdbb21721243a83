"""The pinned snapshots' text, for a tokenizer that learns from the corpus (bpe).

Moved here from the kernel's tokenizer module: the kernel asks the dataset for a
:class:`~xirang.specs.TextCorpus` and no longer knows what a snapshot is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from xirang import xirang_home
from xirang.data import largest_remainder, tier_for
from xirang.specs import TextCorpus, thaw
from xirang_data import dataset
from xirang_data.reader import ReadSettings, ShardReader
from xirang_data.snapshot import Snapshot, load

#: the snapshot column whose text is tokenized
TEXT_FIELD = "text"


def text_corpus(config: Mapping[str, Any], prepared: bool = False) -> TextCorpus:
    """The pinned snapshots' documents as text, read only if the tokenizer asks for them
    (``prepared``: the launch pinned ``data`` already, so nothing is pinned again).

    One snapshot gives its documents once each. A mixture gives as many documents as its
    sources hold together, each source's share its weight (largest remainder): every document
    of a source appears ``quota / documents`` times, rounded up or down evenly along the
    source, so a heavy small source is repeated and a light large one thinned. Its key names
    every source's snapshot and weight, so changing any of them trains anew."""
    data, storage = thaw(config["data"]), config.get("storage")
    if not prepared:
        dataset.resolve(data, storage)  # pins every source (in this copy: the launch pins)
    pinned = dataset.sources(data)
    tiers = [tier_for(s.uri, storage) for s in pinned]
    snaps = [load(tier, s.snapshot) for tier, s in zip(tiers, pinned, strict=True)]
    docs = [snap.samples for snap in snaps]
    if len(pinned) == 1:
        quotas = docs
        key = pinned[0].snapshot
    else:
        quotas = largest_remainder([s.weight for s in pinned], sum(docs)).tolist()
        key = "mixture:" + ",".join(f"{s.snapshot}*{s.weight:g}" for s in pinned)
    cfg = dataset.check(data)

    def batches() -> Iterator[list[str]]:
        for tier, snap, have, want in zip(tiers, snaps, docs, quotas, strict=True):
            reader = ShardReader(snap, tier, ReadSettings(), dataset.tier_settings(cfg, tier.root))
            yield from _repeated(_source_texts(reader), have, want)

    return TextCorpus(key, int(sum(quotas)), batches, xirang_home() / "tokenizers")


def _source_texts(reader: ShardReader) -> Iterator[list[str]]:
    """One pinned snapshot's texts, a list per shard in index order, checksums checked."""
    snap: Snapshot = reader.snap
    try:
        for shard in range(len(snap.shards)):
            table = reader.fetcher.table(shard, lambda s: float(s), {shard})
            yield table.column(TEXT_FIELD).to_pylist()
    finally:
        reader.close()


def _repeated(texts: Iterator[list[str]], have: int, want: int) -> Iterator[list[str]]:
    """``want`` documents out of ``have``: document ``j`` ``(j+1)·want//have − j·want//have``
    times, so repeats (or omissions) are spread evenly and the counts sum to ``want``."""
    seen = 0
    for batch in texts:
        j = np.arange(seen, seen + len(batch), dtype=np.int64)
        copies = ((j + 1) * want // have - j * want // have).tolist()
        seen += len(batch)
        yield [text for text, n in zip(batch, copies, strict=True) for _ in range(n)]
