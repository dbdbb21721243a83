"""The embedded corpus: this Python's standard library source, as bytes.

Every Python installation carries it, so the default run needs no download. It is packed once
into a few large shards under ``XIRANG_HOME/datasets`` and reused; packing goes to a temporary
folder that is renamed into place, so an interrupted first run leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from xirang_core.paths import xirang_home

SHARD_BYTES = 8 * 2**20
SEPARATOR = b"\n\n"


def stdlib_sources() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)


def ensure_packed(home: Path | None = None) -> Path:
    """The folder of packed stdlib shards, packing it first when it does not exist yet."""
    sources = stdlib_sources()
    fingerprint = hashlib.sha256()
    for path in sources:
        fingerprint.update(f"{path}:{path.stat().st_size}\n".encode())
    version = "{}.{}.{}".format(*sys.version_info[:3])
    target = (home or xirang_home()) / "datasets" / f"stdlib-{version}-{fingerprint.hexdigest()[:12]}"
    if (target / "index.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".packing-", dir=target.parent))
    try:
        _pack(sources, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process packed it first; theirs is as good as ours
            if not (target / "index.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _pack(sources: list[Path], out: Path) -> None:
    from rich.progress import Progress

    shards: list[dict] = []
    buffer = bytearray()

    def flush() -> None:
        if not buffer:
            return
        name = f"shard-{len(shards):05d}.bin"
        (out / name).write_bytes(buffer)
        shards.append(
            {"name": name, "bytes": len(buffer), "sha256": hashlib.sha256(buffer).hexdigest()}
        )
        buffer.clear()

    with Progress(transient=True) as progress:
        task = progress.add_task("packing the stdlib corpus", total=len(sources))
        for path in sources:
            try:
                buffer += path.read_bytes() + SEPARATOR
            except OSError:
                pass  # unreadable files are simply not part of the corpus
            if len(buffer) >= SHARD_BYTES:
                flush()
            progress.advance(task)
        flush()
    index = {"source": "python-stdlib", "files": len(sources), "shards": shards}
    (out / "index.json").write_text(json.dumps(index, indent=2))
