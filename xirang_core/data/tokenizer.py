"""The run's tokenizer: chosen with ``tokenizer=<name>``, prepared once by the launching process
and rebuilt by every worker from what the run's config.yaml records.

Three moments, three functions. When the config is composed, :func:`settle_vocab` fills
``model.vocab_size: 0`` with the tokenizer's vocabulary and refuses a model vocabulary too
small for it (no corpus is read). After the dataset is pinned, :func:`resolve_tokenizer` lets
the tokenizer train if it must (bpe, once per snapshot and settings) and records in
``config["runtime"]["tokenizer"]`` what a worker needs; :func:`open_tokenizer` is that worker's
side, and never trains.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from xirang_core.errors import ConfigError, DataError
from xirang_core.paths import xirang_home
from xirang_core.plugins import Registry, get_registry
from xirang_core.specs import TextCorpus, Tokenizer

#: the snapshot column whose text is tokenized
TEXT_FIELD = "text"


def settle_vocab(config: dict[str, Any], registry: Registry) -> None:
    """``model.vocab_size`` against the tokenizer's largest vocabulary: 0 takes it, a smaller
    size is a :class:`ConfigError`. A model section without the key is left alone (a family
    that reads its vocabulary elsewhere)."""
    cls, settings = _tokenizer_class(config, registry)
    check_vocab(config, cls.max_vocab(settings))


def check_vocab(config: dict[str, Any], vocab: int) -> None:
    """Fill or check ``config["model"]["vocab_size"]`` for a tokenizer of ``vocab`` ids."""
    model, name = config["model"], config["tokenizer"]["name"]
    if "vocab_size" not in model:
        return
    size = model["vocab_size"]
    if size == 0:
        model["vocab_size"] = vocab
    elif size < vocab and model.get("pretrained"):  # the weights fix the vocabulary
        from xirang_core.train.pretrained import tokenizer_fix

        raise ConfigError(
            f"tokenizer={name} has {vocab} ids, more than the {size} rows of the weights in "
            f"model.pretrained={model['pretrained']}: they were trained with another "
            f"tokenizer. Use theirs: {tokenizer_fix(model['pretrained'])}"
        )
    elif size < vocab:
        raise ConfigError(
            f"model.vocab_size={size} is smaller than the vocabulary of tokenizer={name} "
            f"({vocab} ids). Use model.vocab_size=0 (the tokenizer's) or any size >= {vocab} "
            f"(a padded size such as a multiple of 64 is fine)."
        )


def resolve_tokenizer(config: dict[str, Any], registry: Registry) -> Tokenizer:
    """The launching process's step after the dataset is pinned (``data.snapshot`` set): the
    tokenizer prepared (:func:`prepare_tokenizer`), then the token shards the run reads pinned
    in ``config["runtime"]["tokens"]`` (small corpora are tokenised here, once)."""
    from xirang_core.data.training import pin_tokens

    tokenizer = prepare_tokenizer(config, registry)
    pin_tokens(config, tokenizer)
    return tokenizer


def prepare_tokenizer(config: dict[str, Any], registry: Registry) -> Tokenizer:
    """The tokenizer prepared (trained when it learns from the corpus and no cached one fits),
    the model's vocabulary checked against it, and ``config["runtime"]["tokenizer"]``
    recorded."""
    cls, settings = _tokenizer_class(config, registry)
    tokenizer = cls.prepare(settings, text_corpus(config))
    check_vocab(config, tokenizer.vocab_size)
    config.setdefault("runtime", {})["tokenizer"] = {
        "vocab_size": tokenizer.vocab_size,
        "fingerprint": tokenizer.fingerprint,
        **tokenizer.runtime(),
    }
    return tokenizer


def open_tokenizer(config: dict[str, Any], registry: Registry | None = None) -> Tokenizer:
    """A worker's copy of the tokenizer :func:`resolve_tokenizer` recorded in ``config``; a
    tokenizer whose files changed since the launch is refused rather than read differently."""
    cls, settings = _tokenizer_class(config, registry or get_registry())
    runtime = (config.get("runtime") or {}).get("tokenizer") or {}
    tokenizer = cls.load(settings, runtime)
    recorded = runtime.get("fingerprint")
    if recorded and tokenizer.fingerprint != recorded:
        raise DataError(
            f"tokenizer={config['tokenizer']['name']} changed since the run was launched "
            f"(fingerprint {recorded}, now {tokenizer.fingerprint}); launch the run again"
        )
    return tokenizer


def text_corpus(config: dict[str, Any]) -> TextCorpus:
    """The pinned snapshots' documents as text, read only if the tokenizer asks for them.

    One snapshot gives its documents once each. A mixture gives as many documents as its
    sources hold together, each source's share its weight (largest remainder): every document
    of a source appears ``quota / documents`` times, rounded up or down evenly along the
    source, so a heavy small source is repeated and a light large one thinned. Its key names
    every source's snapshot and weight, so changing any of them trains anew."""
    from xirang_core.data import dataset
    from xirang_core.data.mixture import largest_remainder
    from xirang_core.data.snapshot import load
    from xirang_core.storage.locate import tier_for

    data, storage = config["data"], config.get("storage")
    dataset.resolve(data, storage)  # pins every source
    pinned = dataset.sources(data)
    docs = [load(tier_for(s.uri, storage), s.snapshot).samples for s in pinned]
    if len(pinned) == 1:
        quotas = docs
        key = pinned[0].snapshot
    else:
        quotas = largest_remainder([s.weight for s in pinned], sum(docs)).tolist()
        key = "mixture:" + ",".join(f"{s.snapshot}*{s.weight:g}" for s in pinned)

    def batches() -> Iterator[list[str]]:
        for source, have, want in zip(pinned, docs, quotas, strict=True):
            yield from _repeated(_source_texts(data, storage, source), have, want)

    return TextCorpus(key, int(sum(quotas)), batches, xirang_home() / "tokenizers")


def _source_texts(data: dict[str, Any], storage: Any, source: Any) -> Iterator[list[str]]:
    """One pinned snapshot's texts, a list per shard in index order, checksums checked."""
    from xirang_core.data import dataset
    from xirang_core.data.reader import ReadSettings

    one = {k: v for k, v in data.items() if k != "sources"}
    one.update(name="snapshot", uri=source.uri, snapshot=source.snapshot)
    reader = dataset.open_reader(one, storage, ReadSettings())
    try:
        for shard in range(len(reader.snap.shards)):
            table = reader.fetcher.table(shard, lambda s: float(s), {shard})
            yield table.column(TEXT_FIELD).to_pylist()
    finally:
        reader.close()


def _repeated(texts: Iterator[list[str]], have: int, want: int) -> Iterator[list[str]]:
    """``want`` documents out of ``have``: document ``j`` ``(j+1)·want//have − j·want//have``
    times, so repeats (or omissions) are spread evenly and the counts sum to ``want``."""
    import numpy as np

    seen = 0
    for batch in texts:
        j = np.arange(seen, seen + len(batch), dtype=np.int64)
        copies = ((j + 1) * want // have - j * want // have).tolist()
        seen += len(batch)
        yield [text for text, n in zip(batch, copies, strict=True) for _ in range(n)]


def _tokenizer_class(config: dict[str, Any], registry: Registry) -> tuple[Any, dict[str, Any]]:
    section = config["tokenizer"]
    settings = {k: v for k, v in section.items() if k != "name"}
    return registry.load("tokenizer", section["name"]), settings
