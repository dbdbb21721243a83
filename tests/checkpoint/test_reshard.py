"""Save with one world size and strategy, resume with another (DDP over gloo <-> single)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.checkpoint.dist_worker import run

pytestmark = pytest.mark.slow


def launch(world: int, run_dir: Path, stop: int, tag: str) -> dict[int, float]:
    """Train to ``stop`` with ``world`` workers (DDP when more than one, spawned; a single
    process runs in this one)."""
    out = run_dir.parent / f"{tag}.json"
    init = run_dir.parent / f"{tag}.init"
    args = (world, str(run_dir), stop, str(out), str(init))
    if world == 1:
        run(0, *args)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        mp.spawn(run, args=args, nprocs=world, join=True)
    return {int(k): v for k, v in json.loads(out.read_text()).items()}


def test_resume_on_another_world_size_and_strategy_matches_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    whole = launch(1, tmp_path / "whole", 9, "whole")
    # DDP on 2 workers, then a single process
    launch(2, tmp_path / "down", 3, "down-1")
    down = launch(1, tmp_path / "down", 6, "down-2")
    # a single process, then DDP on 2 workers
    launch(1, tmp_path / "up", 6, "up-1")
    up = launch(2, tmp_path / "up", 9, "up-2")
    assert sorted(down) == [4, 5, 6] and sorted(up) == [7, 8, 9]
    for step, loss in {**down, **up}.items():
        assert loss == pytest.approx(whole[step], rel=1e-6), step
