"""Training data streamed from S3 (a real moto_server): a rank killed with SIGKILL mid-epoch
resumes with the same batches and reuses the cache it left; two runs on one node share one
cache folder and download each shard once between them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data.conftest import Make
from tests.data.stream_rank import digest
from xirang_core.data.sync import sync
from xirang_core.data.token_shards import tokens_tier
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.data.training import resolve_dataset
from xirang_core.plugins import get_registry
from xirang_core.storage.locate import tier_for

BUCKET = "xirang-stream"
ROOT = Path(__file__).resolve().parents[2]
RANK = [sys.executable, "-m", "tests.data.stream_rank"]


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    import shutil

    from xirang_core.storage.local_s3 import local_s3

    if shutil.which("moto_server") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("moto_server not found: pip install 'moto[server]' (in xirang[dev])")
        pytest.skip("moto_server not found")
    with local_s3(BUCKET) as url:
        yield url


def s3_run(make_dataset: Make, s3: str, tmp_path: Path, name: str) -> tuple[Path, int]:
    """A launched run's config over a snapshot in S3 (its token shards made locally and synced
    there); returns the config file and the bytes of its token shards."""
    local, _ = make_dataset(n=240, per_shard=20)
    uri = f"s3://{BUCKET}/{name}"
    storage = {"name": "s3", "root": "", "endpoint_url": s3, "region": "", "profile": ""}
    data = {"name": "snapshot", "uri": local.root, "seq_len": 8, "val_fraction": 0.0}
    config = {"seed": 5, "storage": storage, "data": data, "model": {"vocab_size": 0}}
    config["tokenizer"] = {"name": "bytes", "separator": "\n\n"}
    resolve_dataset(data, storage)
    resolve_tokenizer(config, get_registry())  # tokenised here, then both trees go to S3
    sync(local, tier_for(uri, storage))
    sync(tokens_tier(local), tokens_tier(tier_for(uri, storage)), config["runtime"]["tokens"][0])
    data.update(uri=uri, cache_dir=str(tmp_path / "cache"), prefetch_shards=2)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    tokens = tokens_tier(tier_for(uri, storage))
    return path, sum(tokens.size(k) for k in tokens.list("shards"))


def ranks(config: Path, world: int, first: int, last: int, out: Path, pause: float):
    """``world`` rank processes reading steps ``first..last``, each logging to ``out.<rank>``."""
    procs = []
    for rank in range(world):
        args = [config, rank, world, first, last, f"{out}.{rank}", pause]
        procs.append(subprocess.Popen([*RANK, *map(str, args)], cwd=ROOT))
    return procs


def hashes(out: Path, rank: int) -> dict[int, str]:
    if not Path(f"{out}.{rank}").exists():
        return {}
    lines = Path(f"{out}.{rank}").read_text().splitlines()
    return {int(a): b for a, b in (line.split() for line in lines) if a.isdigit()}


def uninterrupted(config: Path, steps: int, cache: Path) -> list[dict[int, str]]:
    """Each rank's batch hashes for steps 1..steps, read in this process with its own cache."""
    from xirang_core.data.training import run_batches

    settings = json.loads(config.read_text())
    settings["data"]["cache_dir"] = str(cache)
    out = []
    for rank in range(2):
        train, _ = run_batches(settings, rank, 2, 2, 1)
        out.append({s: digest(train.get(s)[0]) for s in range(1, steps + 1)})
        train.close()
    return out


def fetched(out: Path, rank: int) -> int:
    return int(Path(f"{out}.{rank}").read_text().split("origin_bytes ")[1])


@pytest.mark.slow
def test_a_killed_two_rank_run_resumes_with_the_same_batches_and_its_cache(
    make_dataset: Make, s3: str, tmp_path: Path
) -> None:
    config, shard_bytes = s3_run(make_dataset, s3, tmp_path, "killed")
    steps = 60  # one epoch holds ~580 rows of 9 tokens: 60 steps of 2 x 2 rows is mid-epoch
    whole = uninterrupted(config, steps, tmp_path / "whole-cache")
    killed = ranks(config, 2, 1, steps, tmp_path / "run", 0.05)
    deadline = time.monotonic() + 120
    while min(len(hashes(tmp_path / "run", r)) for r in range(2)) < 10:
        assert time.monotonic() < deadline and all(p.poll() is None for p in killed)
        time.sleep(0.05)
    for p in killed:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    cached = {p: p.stat().st_ino for p in (tmp_path / "cache").rglob("*.arrow")}
    done = min(max(hashes(tmp_path / "run", r)) for r in range(2))
    assert done < steps and cached
    rerun = ranks(config, 2, done + 1, steps, tmp_path / "run", 0.0)
    assert [p.wait(120) for p in rerun] == [0, 0]
    assert [hashes(tmp_path / "run", rank) for rank in range(2)] == whole
    assert sum(fetched(tmp_path / "run", rank) for rank in range(2)) < shard_bytes
    assert all(p.stat().st_ino == ino for p, ino in cached.items())  # reused, not re-fetched


@pytest.mark.slow
def test_two_runs_on_one_node_share_one_cache_and_one_download_per_shard(
    make_dataset: Make, s3: str, tmp_path: Path
) -> None:
    config, shard_bytes = s3_run(make_dataset, s3, tmp_path, "shared")
    steps = 250  # past the end of the epoch: every shard is read
    runs = ranks(config, 1, 1, steps, tmp_path / "a", 0.0) + ranks(
        config, 1, 1, steps, tmp_path / "b", 0.0
    )
    assert [p.wait(120) for p in runs] == [0, 0]
    total = fetched(tmp_path / "a", 0) + fetched(tmp_path / "b", 0)
    assert total == shard_bytes  # each of the 12 shards came from S3 once, for both runs
