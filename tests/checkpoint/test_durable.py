"""A checkpoint reported committed survives power loss: its chunks, then its manifest, are
fsynced (with the folders their names were moved into) before the save returns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.checkpoint.helpers import build, manager, train_step


def test_a_commit_fsyncs_its_chunks_before_its_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    fsync = os.fsync

    def recording(fd: int) -> None:  # the real fsync, and which file it made durable
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    model, optim = build()
    train_step(model, optim, 1)
    mgr = manager(str(tmp_path), model, optim, async_save=False)
    monkeypatch.setattr(os, "fsync", recording)
    mgr.save(1)
    result = mgr.wait(raise_errors=True)
    monkeypatch.undo()
    written = {str(p) for p in tmp_path.rglob("*") if p.is_file() and "chunks" in p.parts}
    manifest = next(str(p) for p in tmp_path.rglob("manifest.json"))
    assert written and written <= set(synced)
    assert max(synced.index(c) for c in written) < synced.index(manifest)
    assert str(Path(manifest).parent) in synced[synced.index(manifest) :]
    assert result.timings["fsync_s"] > 0
