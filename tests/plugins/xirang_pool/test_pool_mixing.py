"""A mixed placement trains balanced from its first step (issue #37, pool to run): the pool
places a 4-card job on one fast device (3 cards) and one slow one (1 card), hands the run its
devices' speeds, and the run's two DDP ranks start at shares 3:1 instead of 2:2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from xirang_pool.scheduler import rank_speeds

from tests.conftest import ONE_LAYER_GPT
from xirang.balance import balance_placement
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
    config = {
        "parallel": {"name": "ddp", "balance": "uniform"},
        "trainer": {"global_batch": 8, "micro_batch": 1},
    }
    assert "shares [6, 2]" in balance_placement(config, [3.0, 1.0])
    assert config["parallel"] == {"name": "ddp", "balance": "adaptive", "balance_shares": [6, 2]}
    assert balance_placement(config, []) == "the ranks' devices are equally fast: even shares"
    assert config["parallel"] == {"name": "ddp", "balance": "uniform"}  # as the user had it
    tp = {"parallel": {"name": "tp", "tp": 2}, "trainer": {"global_batch": 8, "micro_batch": 1}}
    assert "cannot balance" in balance_placement(tp, [3.0, 1.0])
    assert "balance_shares" not in tp["parallel"]
