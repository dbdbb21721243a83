"""The run's tokenizer: chosen with ``tokenizer=<name>``, prepared once by the launching process
and rebuilt by every worker from what the run's config.yaml records.

Three moments, three functions. When the config is composed, :func:`settle_vocab` fills
``model.vocab_size: 0`` with the tokenizer's vocabulary and refuses a model vocabulary too
small for it (no corpus is read). After the dataset is pinned, :func:`resolve_tokenizer` lets
the tokenizer train on the dataset's text if it must (bpe, once per snapshot and settings),
records in the config it derives (``runtime.tokenizer``) what a worker needs, and has the
dataset pin its tokens; :func:`open_tokenizer` is that worker's side, and never trains.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xirang_core.checkpoint.pretrained import tokenizer_fix
from xirang_core.contract import RunConfig
from xirang_core.data.interface import Dataset, apply_pins, open_dataset, with_runtime
from xirang_core.errors import ConfigError, DataError
from xirang_core.plugins import Registry, get_registry
from xirang_core.specs import Tokenizer

#: a byte-level tokenizer's vocabulary: a model this small was written for tokenizer=bytes
BYTES = 256


def settle_vocab(config: dict[str, Any], registry: Registry) -> None:
    """``model.vocab_size`` against the tokenizer's largest vocabulary: 0 takes it, a smaller
    size is a :class:`ConfigError`. A model section without the key is left alone (a family
    that reads its vocabulary elsewhere)."""
    cls, settings = _tokenizer_class(config, registry)
    check_vocab(config, cls.max_vocab(settings))


def check_vocab(config: Mapping[str, Any], vocab: int) -> None:
    """Fill or check ``config["model"]["vocab_size"]`` for a tokenizer of ``vocab`` ids."""
    model, name = config["model"], config["tokenizer"]["name"]
    if "vocab_size" not in model:
        return
    size = model["vocab_size"]
    if size == 0:
        model["vocab_size"] = vocab
    elif size < vocab and model.get("pretrained"):  # the weights fix the vocabulary
        raise ConfigError(
            f"tokenizer={name} has {vocab} ids, more than the {size} rows of the weights in "
            f"model.pretrained={model['pretrained']}: they were trained with another "
            f"tokenizer. Use theirs: {tokenizer_fix(model['pretrained'])}"
        )
    elif size < vocab:
        raise ConfigError(
            f"model.vocab_size={size} is smaller than the vocabulary of tokenizer={name} "
            f"({vocab} ids). Use model.vocab_size=0 (the tokenizer's) or any size >= {vocab} "
            f"(a padded size such as a multiple of 64 is fine)"
            + ("; a model written for bytes takes tokenizer=bytes." if size <= BYTES else ".")
        )


def resolve_tokenizer(
    config: Mapping[str, Any], registry: Registry, dataset: Dataset | None = None
) -> tuple[Tokenizer, RunConfig]:
    """The launching process's step after the dataset is prepared (``data.snapshot`` set): the
    tokenizer prepared (:func:`prepare_tokenizer`), then the dataset's tokens pinned for the
    workers (:meth:`Dataset.pin_tokens`: ``runtime.tokens`` for the snapshot pipeline, whose
    small corpora are tokenised here, once). Returns the tokenizer and the config the workers
    read: ``config`` with ``runtime.tokenizer`` and the pins recorded."""
    dataset = dataset or open_dataset(config, registry)
    tokenizer = prepare_tokenizer(config, registry, dataset)
    config = with_runtime(config, tokenizer=tokenizer_runtime(tokenizer))
    return tokenizer, apply_pins(config, dataset.pin_tokens(config, tokenizer))


def prepare_tokenizer(
    config: Mapping[str, Any], registry: Registry, dataset: Dataset | None = None
) -> Tokenizer:
    """The tokenizer prepared (trained on the dataset's text when it learns from the corpus and
    no cached one fits) and the model's vocabulary checked against it; what a worker needs to
    rebuild it is :func:`tokenizer_runtime`'s."""
    cls, settings = _tokenizer_class(config, registry)
    corpus = (dataset or open_dataset(config, registry)).text_corpus(config)
    tokenizer = cls.prepare(settings, corpus)
    check_vocab(config, tokenizer.vocab_size)
    return tokenizer


def tokenizer_runtime(tokenizer: Tokenizer) -> dict[str, Any]:
    """What config.yaml's ``runtime.tokenizer`` records for the workers' :func:`open_tokenizer`."""
    return {
        "vocab_size": tokenizer.vocab_size,
        "fingerprint": tokenizer.fingerprint,
        **tokenizer.runtime(),
    }


def open_tokenizer(config: Mapping[str, Any], registry: Registry | None = None) -> Tokenizer:
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


def _tokenizer_class(config: Mapping[str, Any], registry: Registry) -> tuple[Any, dict[str, Any]]:
    section = config["tokenizer"]
    settings = {k: v for k, v in section.items() if k != "name"}
    return registry.load("tokenizer", section["name"]), settings
