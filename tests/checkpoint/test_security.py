"""A checkpoint folder is not trusted: reading one runs no code, and with a pool key only
checkpoints signed by that key load (``ckpt verify``, ``ckpt export`` and resume alike)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from xirang_ckpt.cli import main

from tests.checkpoint.helpers import build, manager, train_step
from xirang_core.checkpoint.chunks import CorruptCheckpoint, RefusedCheckpoint, chunk_key
from xirang_core.checkpoint.config import CheckpointConfig, check_checkpoint
from xirang_core.checkpoint.signing import KEY_ENV, KEY_FILE_ENV
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.errors import ConfigError
from xirang_core.storage.tier import FsspecTier


class Payload:
    """What a hostile pickle does when loaded: here, create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def saved_run(run: Path) -> None:
    """A run directory with one checkpoint, as a run leaves it."""
    (run / "config.yaml").write_text(yaml.safe_dump({"checkpoint": {"uri": ""}}))
    model, optim = build()
    mgr = manager(str(run), model, optim)
    train_step(model, optim, 1)
    mgr.save(1)
    mgr.wait(raise_errors=True)


def store_of(run: Path) -> CheckpointStore:
    import fsspec

    return CheckpointStore(FsspecTier(fsspec.filesystem("file"), str(run / "checkpoints")))


def forge(run: Path, edit: Callable[[CheckpointStore, dict[str, bytes]], None]) -> None:
    """Change the checkpoint's files as someone who can write the folder would, and
    recompute every chunk digest and the manifest's checksum (a signature needs the key)."""
    store = store_of(run)
    manifest = store.manifest(1, signed=False)
    files = {n: bytes(d) for n, d in store.read_files(manifest).items()}
    edit(store, files)

    def put(name: str, data: bytes) -> Any:  # DCP's items: one chunk each
        return store.chunks.put_object([data]) if name.startswith("../") else store.chunks.put(data)

    manifest.files = {n: put(n, d)[0] for n, d in files.items()}
    (run / "checkpoints/step-000000001/manifest.json").write_bytes(manifest.to_bytes())


def plant_pickled_metadata(marker: Path) -> Callable[[CheckpointStore, dict[str, bytes]], None]:
    """DCP's own layout: the metadata as a pickle (``.metadata``), here a hostile one."""

    def edit(store: CheckpointStore, files: dict[str, bytes]) -> None:
        import pickle

        del files["metadata.json"]  # xirang's JSON copy gone: only DCP's pickle is left
        files[".metadata"] = pickle.dumps(Payload(marker))

    return edit


def plant_pickled_value(marker: Path) -> Callable[[CheckpointStore, dict[str, bytes]], None]:
    """A non-tensor value (the optimizer's learning rate) replaced by a hostile torch.save."""

    def edit(store: CheckpointStore, files: dict[str, bytes]) -> None:
        meta = json.loads(files["metadata.json"])
        value = next(e for e in meta["storage"] if e["fqn"] == meta["values"][0])
        blob = io.BytesIO()
        torch.save(Payload(marker), blob)
        name = "../" + chunk_key(hashlib.sha256(blob.getvalue()).hexdigest())
        value.update(path=name, at=0, length=len(blob.getvalue()))
        files[name] = blob.getvalue()
        files["metadata.json"] = json.dumps(meta).encode()

    return edit


@pytest.mark.parametrize("plant", [plant_pickled_metadata, plant_pickled_value])
def test_a_planted_pickle_runs_nothing_and_is_refused(tmp_path: Path, capsys, plant) -> None:
    marker = tmp_path / "payload-ran"
    saved_run(tmp_path)
    forge(tmp_path, plant(marker))

    assert main(["verify", str(tmp_path)]) == 1
    assert "step 1: REFUSED" in capsys.readouterr().out
    with pytest.raises(RefusedCheckpoint, match="pickle"):
        main(["export", str(tmp_path), "-o", str(tmp_path / "w.safetensors")])
    model, optim = build(seed=1)
    with pytest.raises(RefusedCheckpoint, match=r"checkpoint.resume: step 1.*pickle"):
        manager(str(tmp_path), model, optim).restore()
    assert not marker.exists()


def test_a_signed_checkpoint_loads_only_under_its_key(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(KEY_ENV, "a" * 32)
    saved_run(tmp_path)
    manifest = json.loads((tmp_path / "checkpoints/step-000000001/manifest.json").read_text())
    assert len(manifest["signature"]) == 64
    assert main(["verify", str(tmp_path)]) == 0
    model, optim = build(seed=1)
    assert manager(str(tmp_path), model, optim).restore() == 2

    monkeypatch.setenv(KEY_ENV, "b" * 32)
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"REFUSED: step 1: the checkpoint is signed by another key than {KEY_ENV}" in out
    with pytest.raises(RefusedCheckpoint, match=f"another key than {KEY_ENV}"):
        manager(str(tmp_path), model, optim).restore()


def test_an_unsigned_or_reforged_checkpoint_is_refused_when_a_key_is_set(
    tmp_path: Path, monkeypatch
) -> None:
    saved_run(tmp_path)  # written without a key
    key_file = tmp_path / "pool.key"
    key_file.write_text("k" * 32)
    key_file.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    model, optim = build(seed=1)
    with pytest.raises(RefusedCheckpoint, match=rf"not signed, and {KEY_FILE_ENV}=.*pool.key"):
        manager(str(tmp_path), model, optim).restore()
    with pytest.raises(RefusedCheckpoint, match="not signed"):
        main(["export", str(tmp_path), "-o", str(tmp_path / "w.safetensors")])
    assert store_of(tmp_path).retain(keep_last=1) == []  # refused is not torn: kept


def test_a_key_file_others_can_read_or_a_short_key_is_refused(tmp_path: Path, monkeypatch) -> None:
    key_file = tmp_path / "pool.key"
    key_file.write_text("k" * 32)
    os.chmod(key_file, 0o644)
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    with pytest.raises(ConfigError, match=r"mode 644.*chmod 600"):
        store_of(tmp_path)
    with pytest.raises(ConfigError, match=r"mode 644"):  # as the config is composed
        check_checkpoint(asdict(CheckpointConfig()))
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(ConfigError, match=f"{KEY_ENV}: the checkpoint key has 5 bytes"):
        check_checkpoint(asdict(CheckpointConfig()))


def test_a_signed_manifest_copied_into_a_newer_step_folder_is_refused(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Its checksum and signature still hold (the body is step 1's); the folder says step 5,
    and resuming there would train on from step 6 with step 1's weights."""
    monkeypatch.setenv(KEY_ENV, "a" * 32)
    saved_run(tmp_path)
    newer = tmp_path / "checkpoints/step-000000005"
    newer.mkdir()
    (newer / "manifest.json").write_bytes(
        (tmp_path / "checkpoints/step-000000001/manifest.json").read_bytes()
    )
    assert main(["verify", str(tmp_path), "--step", "5"]) == 1
    assert "REFUSED: step 5: its manifest is the one of step 1" in capsys.readouterr().out
    model, optim = build(seed=1)
    with pytest.raises(RefusedCheckpoint, match="copied into another step's folder"):
        manager(str(tmp_path), model, optim).restore()


def test_a_chunk_digest_that_is_a_path_is_refused(tmp_path: Path, capsys) -> None:
    saved_run(tmp_path)
    path = tmp_path / "checkpoints/step-000000001/manifest.json"
    doc = json.loads(path.read_text())
    doc.pop("checksum")
    first = next(iter(doc["files"].values()))
    first["chunks"][0] = "../../../../etc/passwd"
    body = json.dumps(doc, sort_keys=True).encode()
    path.write_text(json.dumps({**doc, "checksum": hashlib.sha256(body).hexdigest()}))
    assert main(["verify", str(tmp_path)]) == 1
    assert "'../../../../etc/passwd' is not a SHA-256 in hex" in capsys.readouterr().out


def test_a_crafted_manifest_naming_bytes_it_does_not_hold_fails_verify(
    tmp_path: Path, capsys
) -> None:
    """Every chunk it lists checks out, but DCP's metadata places tensors in a file the
    manifest no longer lists: verify must not say ok for a checkpoint resume cannot load."""
    saved_run(tmp_path)

    dropped = []

    def drop_a_tensor(store: CheckpointStore, files: dict[str, bytes]) -> None:
        dropped.append(next(n for n in files if n.startswith("../chunks/")))
        del files[dropped[0]]

    forge(tmp_path, drop_a_tensor)
    assert main(["verify", str(tmp_path)]) == 1
    assert f"{dropped[0]}, which is not in the checkpoint" in capsys.readouterr().out


def craft_shape(store: CheckpointStore, files: dict[str, bytes]) -> None:
    """One tensor's shape made 8 PiB's worth, its stored chunks left as they were."""
    meta = json.loads(files["metadata.json"])
    tensor = next(iter(meta["tensors"].values()))
    tensor["size"] = [2**50, *tensor["size"][1:]]
    files["metadata.json"] = json.dumps(meta).encode()


def test_a_crafted_tensor_shape_is_refused_as_corrupt_not_allocated(tmp_path: Path, capsys) -> None:
    saved_run(tmp_path)
    forge(tmp_path, craft_shape)
    assert main(["verify", str(tmp_path)]) == 1
    assert "its stored chunks hold" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="no valid checkpoint"):  # one xirang error: line
        main(["export", str(tmp_path), "-o", str(tmp_path / "w.safetensors")])
    model, optim = build(seed=1)
    with pytest.raises(CorruptCheckpoint, match="its stored chunks hold"):
        manager(str(tmp_path), model, optim).restore()


def test_a_step_another_run_signed_with_the_same_key_is_refused(
    tmp_path: Path, monkeypatch
) -> None:
    """The signature binds the run and the step: a newer step copied in from another run of
    the same pool (same key) is refused, not resumed from."""
    import shutil

    monkeypatch.setenv(KEY_ENV, "a" * 32)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for run in (mine, theirs):
        run.mkdir()
        saved_run(run)
    model, optim = build(seed=2)
    other = manager(str(theirs), model, optim)
    other.restore()
    train_step(model, optim, 2)
    other.save(2)
    other.wait(raise_errors=True)
    for chunk in (theirs / "checkpoints" / "chunks").rglob("*"):
        target = mine / "checkpoints" / "chunks" / chunk.relative_to(theirs / "checkpoints/chunks")
        if chunk.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif not target.exists():
            shutil.copy(chunk, target)
    step = "checkpoints/step-000000002"
    shutil.copytree(theirs / step, mine / step)
    assert (mine / "run-id").read_text() != (theirs / "run-id").read_text()
    model, optim = build(seed=1)
    with pytest.raises(RefusedCheckpoint, match=r"step 2 .* saved by another run"):
        manager(str(mine), model, optim).restore()
    model, optim = build(seed=1)
    assert manager(str(theirs), model, optim).restore() == 3  # its own run resumes from it
