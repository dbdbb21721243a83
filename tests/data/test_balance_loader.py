"""``parallel.balance``: a rank reads its share of each step's rows, and DataLoader workers
reading ahead follow a change of the shares rather than hand back rows of the old ones."""

from __future__ import annotations

import torch
from xirang_data.training import run_batches

from tests.data.conftest import Make
from tests.data.test_training import config
from xirang_core.data.step_loader import loop_batches
from xirang_core.train.balance import Shares


def test_loader_workers_follow_new_shares(make_dataset: Make) -> None:
    """Rank 1 of 2, one-row micro-batches, four a step: 2:2 at first, then 1:3 from step 2
    (rows 5, 6, 7 of the step's 4..7); what the workers hand back is ``TokenBatches.get``'s."""
    tier, _ = make_dataset(n=120, per_shard=20)
    train, _ = run_batches(config(tier.root), rank=1, world=2, micro=1, accum=2)
    train.reshare(Shares((2, 2)))
    assert [int(train.positions(1, m)[0]) for m in range(2)] == [1, 3]  # the uniform split's
    loop = loop_batches(train, last_step=6, num_workers=2)
    try:
        for micro in range(2):
            assert torch.equal(loop.get(1, micro)[0], train.get(1, micro)[0])
        train.reshare(Shares((1, 3)))
        assert [int(train.positions(2, m)[0]) for m in range(3)] == [5, 6, 7]
        for micro in range(3):
            got, want = loop.get(2, micro)[0], train.get(2, micro)[0]
            assert torch.equal(got, want)
    finally:
        loop.close()
