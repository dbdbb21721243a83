"""UTF-8 bytes as tokens (``tokenizer=bytes``): a vocabulary of 256, no training, no library.

Each document's bytes are followed by the separator's bytes (``"\\n\\n"``), exactly the token
stream xirang trained on before tokenizers were plugins. ``save`` writes the same mapping as a
Hugging Face byte-level tokenizer (GPT-2's byte alphabet, no merges), so an exported model
reads its ids back with ``transformers``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xirang.specs import TextCorpus
from xirang_tokenizers.hf import TOKENIZER_FILE, write_config

VOCAB = 256


@dataclass
class ByteSettings:
    """``tokenizer=bytes``: the text that ends each document."""

    separator: str = "\n\n"


class ByteTokenizer:
    """Token id = byte value."""

    name = "bytes"
    vocab_size = VOCAB

    def __init__(self, separator: str) -> None:
        self.separator = separator.encode()
        spec = json.dumps({"bytes": "utf-8", "separator": separator})
        self.fingerprint = hashlib.sha256(spec.encode()).hexdigest()[:16]

    @classmethod
    def max_vocab(cls, settings: dict[str, Any]) -> int:
        return VOCAB

    @classmethod
    def prepare(cls, settings: dict[str, Any], corpus: TextCorpus) -> ByteTokenizer:
        return cls(**settings)

    @classmethod
    def load(cls, settings: dict[str, Any], runtime: Mapping[str, Any]) -> ByteTokenizer:
        return cls(**settings)

    def runtime(self) -> dict[str, Any]:
        return {}

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.frombuffer(text.encode() + self.separator, dtype=np.uint8) for text in texts]

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < VOCAB).decode("utf-8", errors="replace")

    def save(self, folder: Path) -> None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        alphabet = byte_alphabet()
        backend = Tokenizer(models.BPE(vocab={alphabet[b]: b for b in range(VOCAB)}, merges=[]))
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        backend.decoder = decoders.ByteLevel()
        folder.mkdir(parents=True, exist_ok=True)
        backend.save(str(folder / TOKENIZER_FILE))
        write_config(folder, "")


def byte_alphabet() -> list[str]:
    """The character that stands for each byte in byte-level tokenizers (GPT-2's scheme):
    printable Latin-1 bytes stand for themselves, the others for code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = iter(range(VOCAB, 2 * VOCAB))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(VOCAB)]
