"""The manager in one process: exact resume, async isolation, fallback, failed saves."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.checkpoint.helpers import build, manager, params, train_step
from xirang_core.checkpoint.chunks import CorruptCheckpoint, chunk_key
from xirang_core.checkpoint.events import read_events
from xirang_core.checkpoint.snapshot import SaveFailed


def train(run: str, steps: range, **checkpoint: object) -> tuple[torch.nn.Module, list[float]]:
    model, optim = build()
    mgr = manager(run, model, optim, **checkpoint)
    start = mgr.restore()
    losses = []
    for step in range(start, steps.stop):
        losses.append(train_step(model, optim, step))
        mgr.on_step_end(step)
    mgr.finish(steps.stop - 1)
    return model, losses


@pytest.mark.parametrize("async_save", [True, False])
def test_resume_continues_bitwise_as_if_never_stopped(tmp_path: Path, async_save: bool) -> None:
    whole, whole_losses = train(str(tmp_path / "a"), range(1, 13))
    train(str(tmp_path / "b"), range(1, 7), async_save=async_save)  # stops at 6
    # the resumed process starts from other RNG states: restore must put them back
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    resumed, resumed_losses = train(str(tmp_path / "b"), range(1, 13), async_save=async_save)
    assert resumed_losses == whole_losses[6:]
    for name, tensor in params(whole).items():
        assert torch.equal(tensor, params(resumed)[name]), name


def test_async_save_is_a_snapshot_of_the_step(tmp_path: Path) -> None:
    model, optim = build()
    mgr = manager(str(tmp_path), model, optim)
    train_step(model, optim, 1)
    at_save = params(model)
    mgr.save(1)
    with torch.no_grad():  # training goes on while the writer works
        for p in model.parameters():
            p.add_(1.0)
    assert mgr.wait(raise_errors=True).step == 1
    fresh, fresh_optim = build(seed=5)
    assert manager(str(tmp_path), fresh, fresh_optim).restore() == 2
    for name, tensor in at_save.items():
        assert torch.equal(tensor, params(fresh)[name]), name


def newest_unique_chunk(run: Path) -> Path:
    step_dirs = sorted((run / "checkpoints").glob("step-*"))
    docs = [json.loads((d / "manifest.json").read_text()) for d in step_dirs[-2:]]
    older = {c for f in docs[0]["files"].values() for c in f["chunks"]}
    mine = [c for f in docs[1]["files"].values() for c in f["chunks"] if c not in older]
    return run / "checkpoints" / chunk_key(mine[0])


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest"])
def test_damaged_newest_checkpoint_falls_back_and_says_why(tmp_path: Path, damage: str) -> None:
    train(str(tmp_path), range(1, 9), interval=4, keep=5)
    if damage == "manifest":
        target = tmp_path / "checkpoints" / "step-000000008" / "manifest.json"
    else:
        target = newest_unique_chunk(tmp_path)
    raw = bytearray(target.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw[len(raw) // 2] ^= 0x40
    target.write_bytes(bytes(raw))
    model, optim = build()
    assert manager(str(tmp_path), model, optim).restore() == 5
    skips = [e for e in read_events(tmp_path) if e["event"] == "skip"]
    assert skips[0]["step"] == 8
    assert "checksum" in skips[0]["reason"] or "JSON" in skips[0]["reason"]


def test_a_save_failing_midway_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    model, optim = build()
    calls = []

    def fail_on_second_write(index: int) -> None:
        calls.append(index)
        if len(calls) > 1:
            raise OSError("disk went away")

    mgr = manager(str(tmp_path), model, optim, keep=5)
    mgr.fail_hook = lambda step: fail_on_second_write if step == 2 else None
    train_step(model, optim, 1)
    mgr.save(1)
    mgr.wait(raise_errors=True)
    train_step(model, optim, 2)
    mgr.save(2)
    with pytest.raises(SaveFailed, match="disk went away"):
        mgr.wait(raise_errors=True)
    assert [p.name for p in (tmp_path / "checkpoints").glob("step-*")] == ["step-000000001"]
    fresh, fresh_optim = build(seed=3)
    assert manager(str(tmp_path), fresh, fresh_optim).restore() == 2


def test_incremental_save_writes_about_what_changed(tmp_path: Path) -> None:
    model, optim = build(frozen=True)
    mgr = manager(str(tmp_path), model, optim, chunk_mb=1 / 64)
    train_step(model, optim, 1)
    mgr.save(1)
    first = mgr.wait(raise_errors=True)
    train_step(model, optim, 2)
    mgr.save(2)
    second = mgr.wait(raise_errors=True)
    frozen = model.emb.weight.numel() * 4
    assert 0.95 * first.bytes_total < first.bytes_new <= first.bytes_total  # equal items: once
    assert second.bytes_new < second.bytes_total - frozen * 0.9


def test_resume_never_and_explicit_step(tmp_path: Path) -> None:
    train(str(tmp_path / "run"), range(1, 7), interval=3, keep=5)
    model, optim = build()
    assert manager(str(tmp_path / "other"), model, optim, resume="never").restore() == 1
    step3 = str(tmp_path / "run" / "checkpoints" / "step-000000003")
    assert manager(str(tmp_path / "other"), model, optim, resume=step3).restore() == 4
    run = str(tmp_path / "run")
    assert manager(str(tmp_path / "other"), model, optim, resume=run).restore() == 7


def test_a_folder_whose_every_checkpoint_is_corrupt_stops_the_resume(tmp_path: Path) -> None:
    """Training from step 1 would quietly throw every saved step away: the run stops and
    says how to start afresh."""
    train(str(tmp_path), range(1, 9), interval=4, keep=5)
    for manifest in (tmp_path / "checkpoints").glob("step-*/manifest.json"):
        manifest.write_text(manifest.read_text()[:-40])  # torn after its commit
    model, optim = build()
    with pytest.raises(CorruptCheckpoint, match=r"every checkpoint .* is unusable.*resume=never"):
        manager(str(tmp_path), model, optim).restore()
    assert manager(str(tmp_path), model, optim, resume="never").restore() == 1


def test_a_save_that_never_committed_is_not_a_checkpoint_to_refuse(tmp_path: Path) -> None:
    """A crash during the very first save leaves a step folder with no manifest: the run
    starts afresh, as it would with no folder at all."""
    (tmp_path / "checkpoints" / "step-000000004").mkdir(parents=True)
    model, optim = build()
    assert manager(str(tmp_path), model, optim).restore() == 1
