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


def replace_text(path: str | Path, text: str) -> Path:
    """``path`` replaced by a file holding ``text`` in one rename, so a reader sees the old
    content or the new, never half. The temporary file's name is unique to this writer: two
    processes storing the same entry at once (two runs calibrating one host) each rename their
    own, and the last one stays."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


def private_file(path: str | Path, text: str | None = None) -> Path:
    """``path`` created empty (or holding ``text``) with mode 0600, so tokens and state never
    exist readable by others, not even for a moment; an existing file is left as it is.

    SQLite creates a database's ``-wal`` and ``-shm`` files with its main file's mode, so a
    store opened on a file made here stays private as a whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as out:
        out.write(text or "")
    return path
