"""Save with one world size and strategy, resume with another (DDP over gloo <-> single)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from tests.checkpoint.dist_worker import run
from tests.conftest import ONE_LAYER_GPT

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


def _losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


def test_a_run_saved_under_fsdp_resumes_under_tensor_parallel(run_xirang, tmp_path: Path) -> None:
    """The real run end to end: ZeRO-3 shards on 2 workers, resumed as tensor-parallel shards
    on 2 workers, continues the single-process trajectory."""
    quick = [*ONE_LAYER_GPT, "trainer.log_every=1", "trainer.sample_tokens=16", "trainer.threads=1"]
    runs = {name: tmp_path / name for name in ("whole", "fsdp", "tp")}
    two = ["trainer.nproc=2"]
    steps = {
        "whole": ["trainer.max_steps=8"],
        "fsdp": [*two, "parallel=fsdp", "trainer.max_steps=4", "checkpoint.interval=4"],
        "tp": [*two, "parallel=tp", "trainer.max_steps=8", f"checkpoint.resume={runs['fsdp']}"],
    }
    for name, args in steps.items():
        done = run_xirang(*quick, *args, f"hydra.run.dir={runs[name]}")
        assert done.returncode == 0, done.stderr[-2000:]
    whole, resumed = _losses(runs["whole"]), _losses(runs["tp"])
    assert sorted(resumed) == [5, 6, 7, 8]
    for step, loss in resumed.items():
        assert loss == pytest.approx(whole[step], rel=1e-4), step
