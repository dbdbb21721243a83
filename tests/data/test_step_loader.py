"""Batches read by DataLoader workers are the loop's own, in the loop's order."""

from __future__ import annotations

import pytest
import torch
from xirang_data.dataset import check
from xirang_data.training import run_batches

from tests.data.conftest import Make
from tests.data.test_training import config
from xirang_core.data.step_loader import LoaderBatches, loop_batches, worker_batches
from xirang_core.errors import ConfigError


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


def test_the_loops_reader_answers_in_order_and_after_a_jump(make_dataset: Make) -> None:
    """``data.num_workers=2``: what the loop reads (in order, then a resume elsewhere, mid-step)
    equals ``TokenBatches.get``; the loop's other attributes are the wrapped batches'."""
    tier, _ = make_dataset(n=120, per_shard=20)
    train, _ = run_batches(config(tier.root), rank=0, world=1, micro=2, accum=2)
    loop = loop_batches(train, last_step=8, num_workers=2)
    assert isinstance(loop, LoaderBatches) and loop.seq_len == train.seq_len
    keys = [(1, 0), (1, 1), (2, 0), (5, 1), (6, 0), (9, 0)]  # a jump to 5, mid-step; past the end
    try:
        for step, micro in keys:
            got, want = loop.get(step, micro), train.get(step, micro)
            assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    finally:
        loop.close()


def test_num_workers_below_zero_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"data.num_workers=-1: must be a whole number >= 0"):
        check({"num_workers": -1})
