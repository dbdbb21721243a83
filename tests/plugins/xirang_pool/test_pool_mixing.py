"""A mixed placement trains balanced from its first step (issue #37, pool to run): the pool
places a 4-card job on one fast device (3 cards) and one slow one (1 card), hands the run its
devices' speeds, and the run's two DDP ranks start at shares 3:1 instead of 2:2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from xirang_pool.scheduler import balance_by_speed, rank_speeds

from tests.conftest import ONE_LAYER_GPT
from xirang.balance import balance_placement
from xirang.launch import read_config, write_config
from xirang.specs import JobSpec, RunConfig
from xirang_service.pool.service import OPERATOR, PoolService

#: a fast device is worth three of the slow reference type's cards for every job class
CLUSTER = {
    "nodes": [
        {"name": "fast-0", "type": "fast", "devices": 1},
        {"name": "slow-0", "type": "slow", "devices": 1},
    ],
    "throughputs": {"reference": "slow", "speed": {"slow": 1.0, "fast": 3.0}},
    "projects": [{"name": "nlp", "guaranteed": 4}],
}
RUN = (
    *ONE_LAYER_GPT,
    "trainer.micro_batch=1",
    "trainer.global_batch=4",
    "trainer.max_steps=2",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    "trainer.threads=1",
    "trainer.nproc=2",
    "parallel=ddp",
)


@pytest.fixture
def mixed_pool(served_pool) -> Iterator[tuple[PoolService, dict[str, str]]]:
    with served_pool(CLUSTER) as served:
        yield served


@pytest.mark.slow
def test_a_mixed_placement_starts_the_ranks_at_shares_by_device_speed(
    run_xirang, mixed_pool
) -> None:
    service, env = mixed_pool
    pool = ("scheduler=pool", "project=nlp", "pool.cards=4", "pool.allow_mixing=true")
    result = run_xirang(*pool, *RUN, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    said = "rank speeds [3.0, 1.0]: shares [3, 1] of 4 micro-batches by device speed"
    assert said in result.stdout, result.stdout[-2000:]
    (job,) = service.jobs(OPERATOR)
    assert job["device_type"] == "fast+slow" and job["state"] == "done"
    run_dir = Path(job["payload"]["run_dir"])
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert next(r["balance_shares"] for r in records if "balance_shares" in r) == [3, 1]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["parallel"]["balance"] == "adaptive"
    assert config["runtime"]["balance_placed"] == "uniform"  # undone at the next placement


def test_devices_are_dealt_to_ranks_in_order_and_a_later_placement_starts_anew() -> None:
    assert rank_speeds([3.0, 1.0, 1.0, 1.0], 2) == [4.0, 2.0]
    assert rank_speeds([3.0, 1.0, 1.0], 2) is None  # three devices cannot split over two
    user = RunConfig(
        {
            "parallel": {"name": "ddp", "balance": "uniform"},
            "trainer": {"global_batch": 8, "micro_batch": 1},
        }
    )
    placed, said = balance_placement(user, [3.0, 1.0])
    assert "shares [6, 2]" in said
    assert placed["parallel"] == {"name": "ddp", "balance": "adaptive", "balance_shares": [6, 2]}
    assert placed["runtime"] == {"balance_placed": "uniform"}
    again, said = balance_placement(placed, [])
    assert said == "the ranks' devices are equally fast: even shares"
    assert again["parallel"] == user["parallel"] and again["runtime"] == {}  # as the user had it
    tp = RunConfig({"parallel": {"name": "tp", "tp": 2}, "trainer": user["trainer"]})
    kept, said = balance_placement(tp, [3.0, 1.0])
    assert "cannot balance" in said and kept["parallel"] == tp["parallel"]


def test_a_placement_derives_the_workers_config_and_leaves_the_one_it_was_given() -> None:
    """A frozen config (read back from config.yaml) is balanced without a write into it."""
    written = {
        "parallel": {"name": "ddp", "balance": "uniform"},
        "trainer": {"global_batch": 8, "micro_batch": 1},
        "runtime": {"devices": 2},
    }
    given = RunConfig(written)
    placed, _ = balance_placement(given, [3.0, 1.0])
    assert isinstance(placed, RunConfig)
    assert placed["runtime"] == {"devices": 2, "balance_placed": "uniform"}
    assert given == written


def test_the_pool_scheduler_rewrites_config_yaml_per_placement(tmp_path: Path) -> None:
    """What the pool's submitter does before the workers start: config.yaml, read back
    read-only, gets the placement's shares in a derived config written in its place."""
    write_config(
        {
            "parallel": {"name": "ddp", "balance": "uniform"},
            "trainer": {"global_batch": 8, "micro_batch": 1},
        },
        tmp_path,
    )
    job = JobSpec(str(tmp_path), nproc=2)
    balance_by_speed(job, [3.0, 1.0])
    assert read_config(tmp_path)["parallel"]["balance_shares"] == [6, 2]
    balance_by_speed(job, [])  # the next placement: one device type
    assert read_config(tmp_path)["parallel"] == {"name": "ddp", "balance": "uniform"}
