"""The feature cache: a transform's output stored by (snapshot, transform, version, config).

Tokenising a corpus is paid once: the next run of the same snapshot and transform settings maps
the stored arrays instead of recomputing them. Any change to the snapshot, the transform's
version or its config gives a new key, so a stale feature is never reused. Entries are written
to a temporary folder and renamed into place, so a crash leaves no half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa


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


def utf8_bytes(field_name: str = "text", separator: str = "\n\n") -> tuple[Transform, Callable]:
    """The embedded tokeniser: a sample's UTF-8 bytes plus a separator (vocabulary of 256)."""
    sep = separator.encode()

    def apply(table: pa.Table) -> Iterator[np.ndarray]:
        for text in table.column(field_name).to_pylist():
            yield np.frombuffer(text.encode() + sep, dtype=np.uint8)

    return Transform("utf8_bytes", 1, {"field": field_name, "separator": separator}), apply


@dataclass
class Features:
    """Per-sample token arrays: ``tokens[offsets[i]:offsets[i+1]]`` belongs to sample ``i``."""

    tokens: np.ndarray
    offsets: np.ndarray

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


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
    if not (folder / "offsets.npy").exists():
        _compute(folder, tables, apply)
        hit = False
    else:
        hit = True
    tokens = np.load(folder / "tokens.npy", mmap_mode="r")
    return Features(tokens, np.load(folder / "offsets.npy")), hit


def _compute(folder: Path, tables: Callable[[], Iterator[pa.Table]], apply: Callable) -> None:
    arrays = [a for table in tables() for a in apply(table)]
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".computing-", dir=folder.parent))
    try:
        np.save(tmp / "tokens.npy", np.concatenate(arrays) if arrays else np.zeros(0, np.uint8))
        np.save(tmp / "offsets.npy", offsets)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process stored the same entry first
            if not (folder / "offsets.npy").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
