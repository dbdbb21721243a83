"""The S3 tier against a real S3 endpoint (moto_server): prepare, sync, read, outages."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path

import pytest
from xirang_data.cli import main as data_cli
from xirang_data.fetch import TierSettings
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules
from xirang_data.reader import ReadSettings, ShardReader
from xirang_data.snapshot import list_ids, load
from xirang_data.sync import sync
from xirang_data.training import pin_tokens, run_batches
from xirang_tokenizers.bytes import ByteTokenizer

from xirang.storage.locate import tier_for
from xirang.storage.retry import RetryPolicy

_names = itertools.count()


def prefix(server) -> str:
    return f"s3://{server.bucket}/ds{next(_names)}"


def local_dataset(tmp_path: Path, n: int = 120, per_shard: int = 20):
    tier = tier_for(str(tmp_path / "local"))
    rows = [{"text": f"sample {i}", "n": i} for i in range(n)]
    snap, _ = prepare(
        rows, tier, Rules(), PrepareSettings(shard_samples=per_shard, progress=False), {}
    )
    return tier, snap


def test_prepare_list_and_verify_on_s3(s3_server, tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"{i}.txt").write_text(f"document {i}")
    dst = prefix(s3_server)
    assert data_cli(["prepare", str(src), dst, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["accepted"] == 30
    assert list_ids(tier_for(dst)) == [made["snapshot"]]
    assert data_cli(["snapshots", dst]) == 0
    assert data_cli(["verify", dst]) == 0
    out = capsys.readouterr().out
    assert made["snapshot"] in out and s3_server.secret not in out


def test_sync_moves_only_what_the_destination_lacks(s3_server, tmp_path: Path) -> None:
    local, snap = local_dataset(tmp_path)
    remote = tier_for(prefix(s3_server))
    first = sync(local, remote)
    assert first.moved == len(snap.shards) and first.skipped == 0
    again = sync(local, remote)
    assert again.moved == 0 and again.skipped_bytes == snap.bytes
    rows = [{"text": f"sample {i}", "n": i} for i in range(120)]
    rows[0]["text"] = "changed"
    newer, _ = prepare(rows, local, Rules(), PrepareSettings(shard_samples=20, progress=False), {})
    third = sync(local, remote, newer.id)
    assert third.moved == 1 and third.skipped == len(snap.shards) - 1
    assert load(remote, newer.id).id == newer.id
    manifest = remote.read(f"snapshots/{newer.id}.json").decode()
    assert s3_server.secret not in manifest and "xirang-test-key" not in manifest


def _read_all(reader: ShardReader) -> list[int]:
    return [n for batch in reader for n in batch.column("n").to_pylist()]


def test_reader_streams_from_s3_through_a_bounded_disk_cache(s3_server, tmp_path: Path) -> None:
    local, snap = local_dataset(tmp_path, n=1200, per_shard=100)  # several takes of 64 batches
    remote = tier_for(prefix(s3_server))
    sync(local, remote)
    largest = max(s.bytes for s in snap.shards)
    tiers = TierSettings(
        cache_dir=str(tmp_path / "cache"),
        cache_limit_bytes=3 * largest,
        memory_limit_bytes=1,
        prefetch_shards=2,
    )
    reader = ShardReader(snap, remote, ReadSettings(batch_size=8, block_shards=1), tiers)
    assert sorted(_read_all(reader)) == list(range(1200))
    cached = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.arrow"))
    assert 0 < cached <= 3 * largest
    assert reader.fetcher.disk.evictions > 0


def test_an_origin_outage_mid_epoch_is_ridden_out(s3_server, tmp_path: Path) -> None:
    local, snap = local_dataset(tmp_path, n=1600, per_shard=100)  # three takes of 64 batches
    remote = tier_for(prefix(s3_server), {"name": "s3", "max_attempts": 1})  # xirang retries
    sync(local, remote)
    tiers = TierSettings(
        cache_dir=str(tmp_path / "cache"),
        memory_limit_bytes=1,
        prefetch_shards=0,
        retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.5),
    )
    reader = ShardReader(snap, remote, ReadSettings(batch_size=10, block_shards=1), tiers)
    seen, restored, after_restore = [], threading.Event(), 0
    for i, batch in enumerate(reader):
        seen += batch.column("n").to_pylist()
        after_restore += restored.is_set()
        if i == 3:
            s3_server.proxy.cut()
            threading.Timer(1.5, lambda: (s3_server.proxy.restore(), restored.set())).start()
    assert after_restore > 0 and reader.fetcher.throttle.retries > 0  # waited, went on
    assert sorted(seen) == list(range(1600))  # every sample exactly once


def test_training_config_reads_s3_with_storage_s3_cache(s3_server, tmp_path: Path) -> None:
    local, snap = local_dataset(tmp_path, n=60)
    uri = prefix(s3_server)
    sync(local, tier_for(uri))
    storage = {
        "name": "s3",
        "root": "",
        "endpoint_url": s3_server.url,
        "region": "",
        "profile": "",
        "max_attempts": 3,
        "retry_mode": "adaptive",
        "max_pool_connections": 4,
    }
    data = {
        "name": "snapshot",
        "uri": uri,
        "seq_len": 8,
        "val_fraction": 0.1,
        "cache_dir": str(tmp_path / "cache"),
    }
    tokenizer = {"name": "bytes", "separator": "\n\n"}
    config = {"seed": 1, "storage": storage, "data": data, "tokenizer": tokenizer}
    train, _ = run_batches(config, 0, 1, 2, 1)
    assert train.get(1)[0].shape == (2, 8)
    pins = pin_tokens(config, ByteTokenizer("\n\n"))  # what a launch pins: the S3 snapshot
    assert pins.data is not None and pins.data["snapshot"] == snap.id


def test_s3_tier_settings_hold_no_secret() -> None:
    from xirang_s3.tier import S3Config

    fields = set(S3Config.__dataclass_fields__)
    assert not fields & {"key", "secret", "aws_access_key_id", "aws_secret_access_key", "token"}


@pytest.mark.parametrize("mode", ["bogus"])
def test_bad_retry_mode_names_the_valid_ones(mode: str) -> None:
    from xirang_s3.tier import S3Tier

    from xirang_core.errors import ConfigError

    with pytest.raises(ConfigError, match="adaptive"):
        S3Tier("s3://b/p", retry_mode=mode)
    time.sleep(0)


def test_missing_credentials_are_one_clear_error(monkeypatch, tmp_path: Path) -> None:
    from xirang_core.errors import DataError

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(DataError, match="credentials"):
        data_cli(["snapshots", "s3://bucket/none"])
