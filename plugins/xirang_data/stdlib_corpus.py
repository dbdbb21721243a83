"""The embedded corpus: this Python's standard library source, prepared as a snapshot.

Every Python installation carries it, so the default run needs no download. It goes through the
same ``data prepare`` as any source (one sample per ``.py`` file, quality gate included) into
``XIRANG_HOME/datasets``; preparing happens in a temporary folder that is renamed into place, so an
interrupted first run leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xirang import xirang_home
from xirang.data import tier_for
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules
from xirang_data.snapshot import SNAPSHOT_DIR
from xirang_data.sources import parse

SHARD_SAMPLES = 256
#: how the files become samples; a change prepares the corpus afresh rather than reusing a
#: folder prepared the old way ("bom": a leading byte-order mark is dropped, as prepare does)
RECIPE = "bom"


def stdlib_sources() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)


def ensure_prepared(home: Path | None = None) -> Path:
    """The dataset folder of the stdlib corpus, preparing it first when it does not exist yet."""
    sources = stdlib_sources()
    fingerprint = hashlib.sha256(RECIPE.encode())
    for path in sources:
        fingerprint.update(f"{path}:{path.stat().st_size}\n".encode())
    version = "{}.{}.{}".format(*sys.version_info[:3])
    target = (
        (home or xirang_home()) / "datasets" / f"stdlib-{version}-{fingerprint.hexdigest()[:12]}"
    )
    if (target / SNAPSHOT_DIR).is_dir() and any((target / SNAPSHOT_DIR).iterdir()):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".preparing-", dir=target.parent))
    try:
        _prepare(sources, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process prepared it first; theirs is as good as ours
            if not (target / SNAPSHOT_DIR).is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _samples(sources: list[Path]) -> Iterator[dict[str, Any]]:
    for path in sources:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # unreadable files are simply not part of the corpus
        yield from parse(path.name, data, "files", "text")


def _prepare(sources: list[Path], out: Path) -> None:
    settings = PrepareSettings(shard_bytes=8 * 2**20, shard_samples=SHARD_SAMPLES, progress=True)
    meta = {"source": "python-stdlib", "files": len(sources)}
    prepare(_samples(sources), tier_for(str(out)), Rules(), settings, meta)
