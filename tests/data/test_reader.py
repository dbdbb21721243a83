"""The reader: every sample once per epoch across ranks and workers, exact resume, checksums."""

from __future__ import annotations

import pyarrow as pa
import pytest
from xirang_data.fetch import TierSettings
from xirang_data.reader import ReadSettings, ShardReader, StatefulLoader

from tests.data.conftest import Make
from xirang_core.errors import DataError


def numbers(batches: list[pa.Table]) -> list[int]:
    return [n for b in batches for n in b.column("n").to_pylist()]


def reader(tier, snap, batch=8, world=1, rank=0, seed=3, **tiers) -> ShardReader:
    read = ReadSettings(batch_size=batch, seed=seed, block_shards=2, world_size=world, rank=rank)
    return ShardReader(snap, tier, read, TierSettings(**tiers))


def test_ranks_partition_an_epoch_exactly_once(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=240, per_shard=20)
    seen = [numbers(list(reader(tier, snap, world=3, rank=r))) for r in range(3)]
    assert len({len(s) for s in seen}) == 1  # every rank the same number of samples
    assert sorted(n for s in seen for n in s) == list(range(240))


def test_every_rank_yields_the_same_number_of_batches_on_uneven_data(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=205, per_shard=20)
    counts = [len(list(reader(tier, snap, world=4, rank=r))) for r in range(4)]
    assert len(set(counts)) == 1
    everything = [n for r in range(4) for n in numbers(list(reader(tier, snap, world=4, rank=r)))]
    assert set(everything) == set(range(205))


def test_shuffle_is_seeded_per_epoch(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=96, per_shard=12)
    r = reader(tier, snap)
    first, second = numbers(list(r)), numbers(list(r))
    assert first != second and sorted(first) == sorted(second) == list(range(96))
    assert numbers(list(reader(tier, snap))) == first


def test_resume_mid_epoch_on_another_world_size(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=192, per_shard=16)
    full = numbers(list(reader(tier, snap, batch=8, world=2, rank=0))) + numbers(
        list(reader(tier, snap, batch=8, world=2, rank=1))
    )
    r = reader(tier, snap, batch=8, world=2, rank=0)
    it = iter(r)
    head = [next(it) for _ in range(3)]
    state = r.state_dict()
    assert state["consumed"] == 3 * 16
    rest = []
    for rank in range(4):  # resume on four ranks
        again = reader(tier, snap, batch=4, world=4, rank=rank)
        again.load_state_dict(state)
        rest += numbers(list(again))
    assert len(numbers(head)) == 24
    assert sorted(rest + numbers(head) + _other_rank_head(tier, snap)) == sorted(full)


def _other_rank_head(tier, snap) -> list[int]:
    it = iter(reader(tier, snap, batch=8, world=2, rank=1))
    return numbers([next(it) for _ in range(3)])


def test_loader_workers_keep_the_order_and_state(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=96, per_shard=16)
    plain = numbers(list(reader(tier, snap)))
    loader = StatefulLoader(reader(tier, snap), num_workers=2)
    got = []
    for i, batch in enumerate(loader):
        got.append(batch)
        if i == 4:
            state = loader.state_dict()
    assert numbers(got) == plain
    resumed = reader(tier, snap)
    resumed.load_state_dict(state)
    assert numbers(list(resumed)) == plain[5 * 8 :]


def test_corrupt_shard_at_origin_is_reported_by_name(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=40, per_shard=20)
    victim = snap.shards[0].key
    data = bytearray(tier.read(victim))
    data[len(data) // 2] ^= 0xFF
    tier.fs.pipe_file(tier.path(victim), bytes(data))
    with pytest.raises(DataError, match=victim.split("/")[1][:16]):
        list(reader(tier, snap, seed=0))


def test_a_missing_shard_is_one_data_error_naming_it_and_the_fix(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=40, per_shard=20)
    victim = snap.shards[0].key
    tier.fs.rm_file(tier.path(victim))
    with pytest.raises(DataError, match=r"shard .* is missing at the origin") as err:
        list(reader(tier, snap, seed=0))
    assert victim in str(err.value) and "xirang data prepare" in str(err.value)


def test_corrupt_cached_copy_is_fetched_again(make_dataset: Make, tmp_path) -> None:
    tier, snap = make_dataset(n=40, per_shard=20)
    cache = tmp_path / "cache"
    first = numbers(list(reader(tier, snap, cache_dir=str(cache))))
    for path in cache.rglob("*.arrow"):
        path.write_bytes(path.read_bytes()[:-10])  # truncated cache copies
    assert numbers(list(reader(tier, snap, cache_dir=str(cache)))) == first


def test_reader_refuses_state_of_another_snapshot(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=40, per_shard=20)
    with pytest.raises(DataError, match="snapshot"):
        reader(tier, snap).load_state_dict({"snapshot": "0" * 16, "epoch": 0, "consumed": 0})
