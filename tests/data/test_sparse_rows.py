"""A resumed run's first batch, read sparsely (offsets, then only the record batches its rows
read), is the batch the packed block gives; a shard's index reads what pyarrow decodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_data import shards, token_shards
from xirang_data.shard_index import ShardIndex
from xirang_data.training import run_batches

from tests.data.conftest import Make
from tests.data.test_training import config


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    batch_tokens=st.integers(1, 90),
    compression=st.sampled_from(["zstd", None]),
    data=st.data(),
)
def test_a_shard_index_reads_the_offsets_and_values_pyarrow_decodes(
    lengths: list[int], batch_tokens: int, compression: str | None, data: st.DataObject
) -> None:
    docs = [[(7 * d + i) % 251 for i in range(n)] for d, n in enumerate(lengths)]
    table = token_shards.token_table(docs, np.dtype(np.uint8))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    starts = token_shards.batch_starts(table.column(0).chunk(0).offsets, batch_tokens)
    raw, info = shards.encode(table, compression=compression, batch_rows=starts)
    sizes = np.diff(offsets[[*starts, len(docs)]])
    assert (sizes[:-1] >= batch_tokens).all()  # a batch closes once it holds batch_tokens
    last_docs = offsets[np.array([*starts[1:], len(docs)]) - 1] - offsets[starts]
    assert (last_docs < batch_tokens).all()  # and not before
    assert list(info.batch_rows) == starts
    index = ShardIndex(raw, info.key)
    assert index.offsets.tolist() == offsets.tolist() and index.dtype == np.uint8
    lo = data.draw(st.integers(0, int(offsets[-1])))
    hi = data.draw(st.integers(lo, int(offsets[-1])))
    assert index.values(lo, hi).tolist() == [t for d in docs for t in d][lo:hi]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token shards of several record batches each, as a real corpus's are."""
    monkeypatch.setattr(token_shards, "BATCH_TOKENS", 40)


@pytest.mark.usefixtures("small_batches")
def test_sparse_first_batches_are_the_packed_ones(make_dataset: Make) -> None:
    """Any step, across blocks and epochs, on 1 or 3 ranks: a fresh reader's sparse batch
    equals the batch of a reader that packed its blocks."""
    tier, _ = make_dataset(n=160, per_shard=20)
    for world in (1, 3):
        packed, _ = run_batches(config(tier.root, shuffle_block=2), 0, world, micro=5, accum=2)
        source = packed.sources[0].source
        assert all(len(i.batch_rows) > 1 for i in source.snap.shards)
        steps = source.rows_per_epoch * 2 // (10 * world)
        for step in (1, 2, steps // 2, steps // 2 + 1, steps - 1, steps + 3):
            fresh, _ = run_batches(config(tier.root, shuffle_block=2), 0, world, 5, 2)
            positions = fresh.positions(step, 1)
            sparse = fresh.rows(positions, sparse=True)
            assert not fresh.sources[0].source._blocks  # read without packing a block
            assert np.array_equal(sparse, packed.rows(positions))
