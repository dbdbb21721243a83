"""Prepare: shards, snapshots named by content, and the quality gate with its quarantine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from xirang_data import shards
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Gate, Rules
from xirang_data.snapshot import Snapshot, list_ids, load

from tests.data.conftest import Make, samples
from xirang.storage.locate import tier_for
from xirang_core.errors import DataError


def reject_sevens(sample: dict) -> str | None:
    """A user rule: quarantines samples whose number ends in 7."""
    return "ends_in_seven" if sample.get("n", 0) % 10 == 7 else None


def test_many_samples_become_few_shards_with_an_index(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=200, per_shard=50)
    assert len(snap.shards) == 4 and snap.samples == 200
    for info in snap.shards:
        data = tier.read(info.key)
        assert shards.checksum_ok(data, info)
        assert shards.decode(data).num_rows == info.samples


def test_same_bytes_give_the_same_snapshot_id(tmp_path: Path, make_dataset: Make) -> None:
    _, first = make_dataset(n=50, per_shard=20)
    _, again = make_dataset(n=50, per_shard=20, root=str(tmp_path / "other"))
    _, other = make_dataset(n=51, per_shard=20, root=str(tmp_path / "third"))
    assert first.id == again.id != other.id


def test_edited_manifest_is_refused(make_dataset: Make) -> None:
    tier, snap = make_dataset(n=50, per_shard=20)
    key = f"snapshots/{snap.id}.json"
    raw = json.loads(tier.read(key))
    raw["shards"][0]["samples"] += 1
    tier.write(key, json.dumps(raw).encode())
    with pytest.raises(DataError, match="modified"):
        load(tier, snap.id)


@pytest.mark.parametrize("key", ["../../etc/passwd", "/etc/passwd", "shards/../x.arrow"])
def test_paths_outside_the_dataset_root_are_refused(key: str) -> None:
    raw = {"key": key, "samples": 1, "bytes": 1, "sha256": "0" * 64}
    with pytest.raises(DataError, match="outside the dataset root"):
        shards.ShardInfo.from_dict(raw)


def test_pinned_snapshot_that_is_absent_fails_loudly(make_dataset: Make) -> None:
    tier, _ = make_dataset(n=20)
    with pytest.raises(DataError, match="not in"):
        load(tier, "0123456789abcdef")


def test_every_reason_is_quarantined_and_counted(tmp_path: Path) -> None:
    bad = [
        {"text": ""},
        {"text": "   "},
        {"text": "ab"},
        {"text": "x" * 500},
        {"text": b"\xff\xfe"},
        {"other": "no text"},
        {"text": "line", "_error": "line 3 is not JSON"},
    ]
    good = samples(30)
    tier = tier_for(str(tmp_path / "d"))
    rules = Rules(min_chars=3, max_chars=100, rule=f"{__name__}:reject_sevens")
    rows = good + bad + [good[0]]  # and one duplicate
    snap, report = prepare(rows, tier, rules, PrepareSettings(progress=False), {})
    assert report.reasons == {
        "empty": 2,
        "too_short": 1,
        "too_long": 1,
        "not_utf8": 1,
        "missing_field": 1,
        "not_json": 1,
        "duplicate": 1,
        "ends_in_seven": 3,
    }
    trained = [
        t for s in snap.shards for t in shards.decode(tier.read(s.key)).column("n").to_pylist()
    ]
    assert sorted(trained) == [n for n in range(30) if n % 10 != 7]
    quarantined = shards.decode(tier.read(snap.quarantine[0].key))
    assert quarantined.num_rows == report.quarantined
    assert set(quarantined.column("reason").to_pylist()) == set(report.reasons)


def test_duplicates_are_caught_by_content() -> None:
    gate = Gate(Rules())
    assert gate.reason({"text": "hello"}) is None
    assert gate.reason({"text": "hello"}) == "duplicate"


def test_nothing_passing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no sample passed"):
        prepare(
            [{"text": ""}], tier_for(str(tmp_path)), Rules(), PrepareSettings(progress=False), {}
        )


def test_snapshots_are_listed_oldest_first(make_dataset: Make) -> None:
    tier, first = make_dataset(n=20)
    _, second = make_dataset(n=21)
    assert list_ids(tier) == [first.id, second.id]
    assert load(tier).id == second.id
    assert isinstance(
        Snapshot.from_json(tier.read(f"snapshots/{first.id}.json").decode()), Snapshot
    )
