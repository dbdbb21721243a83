"""run_group binds each rank to its own device before the group opens (NCCL and HCCL put a
rank's communicator and barriers on the current device, device 0 until set).

The rank's entry point runs in this process with torch.distributed's group calls and
``torch.cuda.set_device`` replaced by recorders (there is no GPU here): the test checks the
order and the device index, which is what NCCL would act on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from xirang.comm import launch


def _answer(rank: int, world: int) -> int:
    return rank * 10


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    seen: list[tuple[str, object]] = []
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):  # the rank sets them: restored after
        monkeypatch.setenv(name, "0")
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: seen.append(("set_device", i)))
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: seen.append(("init", a[0])))
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: seen.append(("barrier", None)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    return seen


def test_nccl_rank_sets_its_device_before_the_group_and_barrier(calls, tmp_path: Path) -> None:
    launch._rank_main(3, 4, "nccl", 1, str(tmp_path), _answer, ())
    assert calls[0] == ("set_device", 3)
    assert [c[0] for c in calls] == ["set_device", "init", "barrier"]
    assert (tmp_path / "3.pkl").exists()


def test_gloo_rank_leaves_the_device_alone(calls, tmp_path: Path) -> None:
    launch._rank_main(1, 2, "gloo", 1, str(tmp_path), _answer, ())
    assert [c[0] for c in calls] == ["init", "barrier"]
