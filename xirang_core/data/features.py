"""The feature cache: a transform's output stored by (snapshot, transform, version, config).

Tokenising a corpus is paid once: the next run of the same snapshot and transform settings maps
the stored arrays instead of recomputing them. Any change to the snapshot, the transform's
version or its config gives a new key, so a stale feature is never reused. Entries are written
to a temporary folder and renamed into place, so a crash leaves no half-written entry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xirang_core.paths import publishing
from xirang_core.specs import Tokenizer

META_FILE = "meta.json"


@dataclass(frozen=True)
class Transform:
    """A named, versioned function from a batch of samples to one token array per sample."""

    name: str
    version: int
    config: dict[str, Any] = field(default_factory=dict)

    def key(self, snapshot_id: str) -> str:
        spec = {
            "snapshot": snapshot_id,
            "name": self.name,
            "version": self.version,
            "config": self.config,
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def tokenize(tokenizer: Tokenizer, field_name: str = "text") -> tuple[Transform, Callable]:
    """The run's tokenizer as a transform: each document's ids and its end-of-document marker,
    stored in the smallest unsigned type that holds the vocabulary (bytes: one byte a token).
    The key holds the tokenizer's name and fingerprint, so two tokenizers never share tokens."""
    dtype = token_dtype(tokenizer.vocab_size)

    def apply(table: pa.Table) -> Iterator[np.ndarray]:
        for ids in tokenizer.encode_batch(table.column(field_name).to_pylist()):
            yield np.asarray(ids, dtype=dtype)

    identity = {"tokenizer": tokenizer.name, "fingerprint": tokenizer.fingerprint}
    return Transform("tokens", 2, {"field": field_name, **identity}), apply


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type whose range holds ids ``0 .. vocab_size - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


@dataclass
class Features:
    """Per-sample token arrays: ``tokens[offsets[i]:offsets[i+1]]`` belongs to sample ``i``."""

    tokens: np.ndarray
    offsets: np.ndarray
    #: UTF-8 bytes of the documents' text (end-of-document markers not counted)
    text_bytes: int

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def bytes_per_token(self) -> float:
        """Text bytes per stored token: converts a loss in nats per token into bits per byte,
        which compares across tokenizers (every tokenizer encodes the same bytes)."""
        return self.text_bytes / len(self.tokens) if len(self.tokens) else 0.0


def cached(
    root: Path,
    snapshot_id: str,
    transform: Transform,
    tables: Callable[[], Iterator[pa.Table]],
    apply: Callable[[pa.Table], Iterator[np.ndarray]],
) -> tuple[Features, bool]:
    """The features for ``snapshot_id``; computed from ``tables()`` only when not stored yet.
    Returns them and whether they came from the cache."""
    folder = root / transform.key(snapshot_id)
    hit = (folder / META_FILE).exists()
    if not hit:
        _compute(folder, tables, apply, transform)
    meta = json.loads((folder / META_FILE).read_text())
    tokens = np.load(folder / "tokens.npy", mmap_mode="r")
    return Features(tokens, np.load(folder / "offsets.npy"), meta["text_bytes"]), hit


def _compute(
    folder: Path, tables: Callable[[], Iterator[pa.Table]], apply: Callable, transform: Transform
) -> None:
    arrays, text_bytes = [], 0
    for table in tables():
        arrays.extend(apply(table))
        text_bytes += pc.sum(pc.binary_length(table.column(transform.config["field"]))).as_py() or 0
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
    meta = {
        "transform": {"name": transform.name, "version": transform.version, **transform.config},
        "documents": len(arrays),
        "tokens": int(offsets[-1]),
        "text_bytes": text_bytes,
        "bytes_per_token": text_bytes / int(offsets[-1]) if offsets[-1] else 0.0,
    }
    with publishing(folder) as tmp:
        np.save(tmp / "tokens.npy", np.concatenate(arrays) if arrays else np.zeros(0, np.uint8))
        np.save(tmp / "offsets.npy", offsets)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
