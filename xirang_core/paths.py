"""Where xirang keeps state that outlives a run, and how an entry there is written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def xirang_home() -> Path:
    """The cache directory: ``XIRANG_HOME``, default ``~/.cache/xirang``."""
    return Path(os.environ.get("XIRANG_HOME") or Path.home() / ".cache" / "xirang")


@contextlib.contextmanager
def publishing(target: Path) -> Iterator[Path]:
    """A fresh folder beside ``target`` to fill; renamed to ``target`` when the block ends
    without error, so a reader sees the whole entry or none and a crash leaves no half of one.
    When another process published ``target`` first, its entry stays: cache entries are keyed
    by their inputs, so both hold the same content."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
