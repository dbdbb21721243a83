"""Training data streamed from S3 (a real moto_server): a 2-rank training run reading through
2 DataLoader workers a rank, killed with SIGKILL mid-epoch, resumes with the same batches and
reuses the cache it left; two runs on one
node share one cache folder and download each shard once between them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xirang_data.sync import sync
from xirang_data.token_shards import tokens_tier
from xirang_data.training import resolve_dataset

from tests.conftest import ONE_LAYER_GPT, require_moto_server
from tests.data.conftest import Make
from xirang.specs import thaw
from xirang.storage.locate import tier_for
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.plugins import get_registry

BUCKET = "xirang-stream"
ROOT = Path(__file__).resolve().parents[2]
RANK = [sys.executable, "-m", "tests.data.stream_rank"]


@pytest.fixture(scope="module")
def s3_requests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The moto server's request log: a line per request, method and path."""
    return tmp_path_factory.mktemp("moto") / "requests.log"


@pytest.fixture(scope="module")
def s3(s3_requests: Path) -> Iterator[str]:
    from xirang.storage.local_s3 import local_s3

    require_moto_server()
    with local_s3(BUCKET, log=s3_requests) as url:
        yield url


def s3_run(make_dataset: Make, s3: str, tmp_path: Path, name: str) -> tuple[Path, int]:
    """A launched run's config over a snapshot in S3 (its token shards made locally and synced
    there); returns the config file and the bytes of its token shards (not their sidecars)."""
    local, _ = make_dataset(n=240, per_shard=20)
    uri = f"s3://{BUCKET}/{name}"
    storage = {"name": "s3", "root": "", "endpoint_url": s3, "region": "", "profile": ""}
    data = {"name": "snapshot", "uri": local.root, "seq_len": 8, "val_fraction": 0.0}
    config = {"seed": 5, "storage": storage, "data": data, "model": {"vocab_size": 0}}
    config["tokenizer"] = {"name": "bytes", "separator": "\n\n"}
    resolve_dataset(data, storage)
    config = thaw(resolve_tokenizer(config, get_registry())[1])  # tokenised here, then to S3
    data = config["data"]
    sync(local, tier_for(uri, storage))
    sync(tokens_tier(local), tokens_tier(tier_for(uri, storage)), config["runtime"]["tokens"][0])
    data.update(uri=uri, cache_dir=str(tmp_path / "cache"), prefetch_shards=2)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    tokens = tokens_tier(tier_for(uri, storage))
    return path, sum(tokens.size(k) for k in tokens.list("shards") if k.endswith(".arrow"))


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


def fetched(out: Path, rank: int) -> int:
    return int(Path(f"{out}.{rank}").read_text().split("origin_bytes ")[1])


def losses(run_dir: Path) -> dict[int, dict[int, float]]:
    """Each segment's loss per step, from the run's metrics.jsonl."""
    by_segment: dict[int, dict[int, float]] = {}
    text = (run_dir / "metrics.jsonl").read_text()
    for line in text[: text.rfind("\n") + 1].splitlines():  # whole lines: the run writes on
        record = json.loads(line)
        if "loss" in record:
            by_segment.setdefault(record["segment"], {})[record["step"]] = record["loss"]
    return by_segment


def logged(run_dir: Path) -> int:
    """Steps the run's first segment has logged so far."""
    if not (run_dir / "metrics.jsonl").exists():
        return 0
    return len(losses(run_dir).get(1, {}))


def requests(log: Path, since: int, prefix: str) -> list[str]:
    """The request log's lines about keys under ``prefix`` after its byte ``since``."""
    with open(log, "rb") as f:
        f.seek(since)
        lines = f.read().decode(errors="replace").splitlines()
    return [line for line in lines if f" /{BUCKET}/{prefix}/" in line]


def shard_gets(log: Path, since: int, prefix: str) -> list[str]:
    """Shard keys GET from the origin under ``prefix`` after byte ``since`` of the request log."""
    pattern = rf"GET /{BUCKET}/{prefix}/tokens/shards/(\w+\.arrow)"
    found = (re.search(pattern, line) for line in requests(log, since, prefix))
    return [m.group(1) for m in found if m]


@pytest.mark.slow
def test_a_killed_two_worker_training_run_resumes_exactly_and_reuses_its_cache(
    make_dataset: Make, s3: str, s3_requests: Path, tmp_path: Path
) -> None:
    """A real 2-rank DDP run over S3 with ``data.num_workers=2`` killed with SIGKILL (launcher,
    ranks and their DataLoader workers) mid-epoch, then the same command again: the steps it
    computes again have exactly the losses they had (the same batches into the same model: the
    resumed loader restarts its workers at the checkpoint's step, its first batch read sparsely),
    and no shard it had cached is asked of S3 again."""
    local, _ = make_dataset(n=600, per_shard=25)  # ~400 rows of 33 tokens in 24 shards: 100 steps
    storage = {"name": "s3", "root": "", "endpoint_url": s3, "region": "", "profile": ""}
    sync(local, tier_for(f"s3://{BUCKET}/killed", storage))
    command = [
        sys.executable, "-m", "xirang", *ONE_LAYER_GPT, "trainer.nproc=2", "parallel=ddp",
        "storage=s3_cache", f"storage.endpoint_url={s3}", f"data.uri=s3://{BUCKET}/killed",
        f"data.cache_dir={tmp_path / 'cache'}", "data.val_fraction=0", "data.prefetch_shards=2",
        "data.num_workers=2",
        "checkpoint=every_steps", "checkpoint.interval=10", "trainer.max_steps=40",
        "trainer.log_every=1", "trainer.sample_tokens=0", f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    log = open(tmp_path / "killed.log", "wb")  # noqa: SIM115 - the run's, closed below
    run = subprocess.Popen(command, cwd=tmp_path, start_new_session=True, stderr=log, stdout=log)
    deadline = time.monotonic() + 600
    while logged(tmp_path / "run") < 14:  # past the checkpoint at 10, before the one at 20
        assert run.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(run.pid, signal.SIGKILL)  # the launcher and both workers, mid-step
    run.wait()
    log.close()
    cached = {p.name: p.stat().st_ino for p in (tmp_path / "cache").rglob("*.arrow")}
    mark = s3_requests.stat().st_size
    assert cached and set(cached) <= set(shard_gets(s3_requests, 0, "killed"))  # log is read
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    segments = losses(tmp_path / "run")
    assert len(segments) == 2
    first, resumed = segments[min(segments)], segments[max(segments)]
    overlap = sorted(set(first) & set(resumed))
    assert len(overlap) >= 3 and max(resumed) == 40 and max(first) < 40
    assert [first[s] for s in overlap] == [resumed[s] for s in overlap]  # exactly
    assert requests(s3_requests, mark, "killed")  # the log holds the second run's requests too
    asked = shard_gets(s3_requests, mark, "killed")  # none if the first run prefetched them all
    assert not set(asked) & set(cached)  # the cache left behind served its shards
    after = {p.name: p.stat().st_ino for p in (tmp_path / "cache").rglob("*.arrow")}
    assert all(after[name] == ino for name, ino in cached.items())  # reused, not re-fetched


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
