"""Byte-level BPE trained on the run's own snapshot (``tokenizer=bpe``).

GPT-2's recipe through the Hugging Face ``tokenizers`` trainer: text split by GPT-2's
pre-tokenizer into byte-level words, all 256 bytes in the alphabet (any text encodes, nothing
is unknown), merges learnt until ``vocab_size``, and ``<|endoftext|>`` as the end of every
document. Training runs once per (snapshot, settings, recipe, library version) in the launching
process; the result is kept under ``XIRANG_HOME/tokenizers/<key>/`` as a folder that
``transformers`` loads, published whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xirang import ConfigError
from xirang.data import publishing
from xirang.specs import TextCorpus
from xirang_tokenizers.hf import TOKENIZER_FILE, HFTokenizer, read_backend, write_config

EOS = "<|endoftext|>"
#: the training recipe's version: a change that alters the result changes the cache key
RECIPE = 1
#: the 256 bytes and <|endoftext|>
SMALLEST = 257


@dataclass
class BPESettings:
    """``tokenizer=bpe``: the vocabulary size (bytes and <|endoftext|> included) and how often
    a pair must occur in the corpus to be merged."""

    vocab_size: int = 4096
    min_frequency: int = 2


class BPETokenizer(HFTokenizer):
    """A trained byte-level BPE; everything but training is :class:`HFTokenizer`'s."""

    name = "bpe"

    @classmethod
    def max_vocab(cls, settings: dict[str, Any]) -> int:
        vocab = settings["vocab_size"]
        if vocab < SMALLEST:
            raise ConfigError(
                f"tokenizer.vocab_size={vocab}: byte-level BPE needs at least {SMALLEST} "
                f"(the 256 bytes and {EOS}); use tokenizer=bytes for a byte vocabulary"
            )
        if settings["min_frequency"] < 1:
            raise ConfigError(f"tokenizer.min_frequency={settings['min_frequency']}: at least 1")
        return vocab

    @classmethod
    def prepare(cls, settings: dict[str, Any], corpus: TextCorpus) -> BPETokenizer:
        cls.max_vocab(settings)
        folder = corpus.cache / cache_key(settings, corpus.snapshot)
        if not (folder / TOKENIZER_FILE).is_file():
            with publishing(folder) as tmp:
                trained = train(settings, corpus)
                trained.save(str(tmp / TOKENIZER_FILE))
                write_config(tmp, EOS)
        return cls(read_backend(folder / TOKENIZER_FILE), EOS, folder / TOKENIZER_FILE)

    @classmethod
    def load(cls, settings: dict[str, Any], runtime: Mapping[str, Any]) -> BPETokenizer:
        if "path" not in runtime:
            raise ConfigError(
                "tokenizer=bpe: the run's config records no trained tokenizer "
                "(runtime.tokenizer.path); launch the run with python -m xirang, which trains it"
            )
        return super().load(settings, runtime)


def cache_key(settings: dict[str, Any], snapshot: str) -> str:
    import tokenizers

    spec = {
        "snapshot": snapshot,
        "vocab_size": settings["vocab_size"],
        "min_frequency": settings["min_frequency"],
        "recipe": RECIPE,
        "tokenizers": tokenizers.__version__,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def train(settings: dict[str, Any], corpus: TextCorpus) -> Any:
    """A byte-level BPE learnt from every document of ``corpus``; prints a line before and
    after, as it takes a while on a large corpus (seconds for the stdlib one)."""
    from rich.console import Console
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    console = Console(stderr=True)
    console.print(
        f"training the bpe tokenizer (vocab_size={settings['vocab_size']}, min_frequency="
        f"{settings['min_frequency']}) on snapshot {corpus.snapshot}, {corpus.documents:,} "
        f"documents; once per snapshot and settings",
        highlight=False,
    )
    started = time.perf_counter()
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=settings["vocab_size"],
        min_frequency=settings["min_frequency"],
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stderr.isatty(),  # its own bars, on a terminal only
    )
    backend.train_from_iterator(corpus.batches(), trainer, length=corpus.documents)
    console.print(
        f"trained the bpe tokenizer: {backend.get_vocab_size()} tokens in "
        f"{time.perf_counter() - started:.1f} s",
        highlight=False,
    )
    return backend
