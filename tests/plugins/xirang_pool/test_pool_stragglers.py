"""A balanced run's straggler reaches the pool (issue #37): the executor's watch passes each
straggler event of the current placement on once, with the speeds, steps left and restart cost
the pool weighs a drain with; a real run slowed mid-run (``drill.slow``, a cgroup CPU quota)
under ``scheduler=pool`` lands in its job's history."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from xirang_pool.stragglers import StragglerRelay

from tests.parallel.test_straggler import RUN, SLOW_AT
from xirang_core.checkpoint.events import record_event
from xirang_core.devices.cgroup import CPU_CGROUP
from xirang_service.pool.client import PoolClient
from xirang_service.pool.service import OPERATOR, PoolService

#: one device per node: a two-card job's ranks are on two nodes, the third is room to move to
CLUSTER = {
    "nodes": [{"name": f"n{i}", "type": "cpu", "devices": 1} for i in range(3)],
    "projects": [{"name": "nlp", "guaranteed": 3}],
}


@pytest.fixture
def pool(served_pool) -> Iterator[tuple[PoolService, dict[str, str]]]:
    with served_pool(CLUSTER) as (service, env):
        service.drain_stragglers = True  # xirang pool serve --drain-stragglers
        yield service, env


def history(service: PoolService, job: int) -> list[dict]:
    return service.job_history(OPERATOR, job)["events"]


def test_the_watch_passes_each_straggler_of_this_placement_on_once(
    pool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run directory is written here as a run writes it (config, a segment's start, the
    balancer's events): one straggler before this placement started, one after."""
    service, env = pool
    client = PoolClient(env["XIRANG_POOL_URL"], env["XIRANG_POOL_TOKEN"])
    job = client.submit(cards=2)
    started = job["started"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"trainer": {"max_steps": 100_000}}))
    relay = StragglerRelay(client, job["id"], str(run_dir), started)
    event = {"rank": 1, "step": 40, "speed_ratio": 0.2, "share": 1, "of": 8}
    record_event(run_dir, "straggler", speeds=[5.0, 0.25], **event)
    relay.poll()
    assert history(service, job["id"])[-1]["event"] != "straggler"  # its first step unseen yet
    segment = {"segment": 1, "start_step": 1, "time": started + 12.5}
    (run_dir / "segments.jsonl").write_text(json.dumps(segment) + "\n")
    relay.poll()
    relay.poll()
    said = capsys.readouterr().out
    assert said.count("pool: straggler rank 1 drained: the run finishes about") == 1, said
    stragglers = [e for e in history(service, job["id"]) if e["event"] == "straggler"]
    assert len(stragglers) == 1 and "on n1; drained" in stragglers[0]["text"]
    moved = client.job(job["id"])
    assert moved["requeues"] == 1 and moved["devices"] == [0, 2]  # off n1, onto n2


@pytest.mark.slow
def test_a_run_slowed_under_the_pool_reports_its_straggler_to_the_pool(run_xirang, pool) -> None:
    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip(f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)")
    service, env = pool
    done = run_xirang(
        "scheduler=pool",
        "project=nlp",
        "pool.cards=2",
        "scheduler.poll_s=0.5",
        *RUN,
        "trainer.max_steps=20",
        "scheduler.worker_quota=[1.0,1.0]",
        "parallel.balance_shares=[4,4]",
        f"+drill={{slow:[[{SLOW_AT},1,0.05]]}}",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = service.jobs(OPERATOR)
    assert job["state"] == "done"
    [told] = [e for e in history(service, job["id"]) if e["event"] == "straggler"]
    # drained or only reported, as the model weighed this machine's step times: either way the
    # pool heard of rank 1 on its node, and a drain moved the job and let the run finish
    assert told["text"].startswith("straggler reported: rank 1 at "), told
    assert "on n1" in told["text"] or "on n0" in told["text"]
    assert "pool: straggler rank 1 " in done.stdout
    assert job["requeues"] == (1 if "; drained:" in told["text"] else 0)
