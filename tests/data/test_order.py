"""Invariants of the epoch order and its partition, for any shard sizes and world sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_core.data.order import EpochOrder, Partition

shard_sizes = st.lists(st.integers(1, 30), min_size=1, max_size=12).map(tuple)


@settings(max_examples=60, deadline=None)
@given(shard_sizes, st.integers(0, 2**16), st.integers(0, 5), st.integers(1, 5))
def test_an_epoch_is_a_permutation_of_all_samples(sizes, seed, epoch, block) -> None:
    order = EpochOrder(sizes, seed, epoch, True, block)
    assert sorted(order.samples.tolist()) == list(range(sum(sizes)))
    shard, row = order.locate(order.samples)
    assert (row >= 0).all() and (row < np.array(sizes)[shard]).all()


@settings(max_examples=60, deadline=None)
@given(shard_sizes, st.integers(1, 8), st.integers(1, 6))
def test_ranks_split_every_global_batch_without_overlap(sizes, batch, world) -> None:
    n = sum(sizes)
    parts = [Partition(batch, world, r) for r in range(world)]
    batches = parts[0].batches_in(n)
    positions = [np.concatenate([p.positions(g) for g in range(batches)]) for p in parts]
    flat = np.concatenate(positions)
    assert len(set(flat.tolist())) == len(flat)  # nothing read twice before the epoch wraps
    assert set(range(n)) <= set(flat.tolist())  # nothing skipped
    assert len({len(p) for p in positions}) == 1  # every rank the same count


@settings(max_examples=40, deadline=None)
@given(shard_sizes, st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.data())
def test_resume_on_another_world_size_continues_the_same_order(sizes, b, w1, w2, data) -> None:
    n = sum(sizes)
    first = Partition(b, w1)
    done = data.draw(st.integers(0, first.batches_in(n)))
    consumed = min(n, done * first.global_batch)
    ranks = [Partition(b, w2, r) for r in range(w2)]
    batches = ranks[0].batches_in(n, consumed)
    rest = [p.positions(g, consumed) for g in range(batches) for p in ranks]
    rest_flat = [p for g in rest for p in g.tolist() if p < n]
    assert rest_flat == list(range(consumed, n))
