"""Batches read by DataLoader workers are the loop's own, in the loop's order."""

from __future__ import annotations

import torch

from tests.data.conftest import Make
from tests.data.test_training import config
from xirang_core.data.step_loader import worker_batches
from xirang_core.data.training import run_batches


def test_worker_batches_equal_the_loops_batches_in_order(make_dataset: Make) -> None:
    """Two worker processes, chunks that do not divide the steps, two micro-batches a step:
    every batch equals ``TokenBatches.get`` of its (step, micro), and none is missing."""
    tier, _ = make_dataset(n=120, per_shard=20)
    train, _ = run_batches(config(tier.root), rank=0, world=1, micro=2, accum=2)
    got = list(worker_batches(train, 3, 9, num_workers=2, chunk=3))
    want = [train.get(step, micro) for step in range(3, 10) for micro in range(2)]
    assert len(got) == len(want) == 14
    for rows, (x, y) in zip(got, want, strict=True):
        assert torch.equal(rows[:, :-1], x) and torch.equal(rows[:, 1:], y)
