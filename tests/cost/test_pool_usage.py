"""Idle time and findings for pool jobs: the local executor (``scheduler=pool``) reports when
the run ended and its utilisation; the pool meters them into charges with findings and costs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from xirang_local import scheduler as local_scheduler
from xirang_pool import scheduler as pool_scheduler
from xirang_pool.scheduler import PoolScheduler

from xirang_core.specs import JobSpec
from xirang_core.train.cost import cost_fields
from xirang_service.console.state import read_state
from xirang_service.cost import findings
from xirang_service.cost.governor import Governor, PoolBudgets
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.cost.usage import run_usage
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.rest import serve
from xirang_service.pool.service import OPERATOR, PoolService, RecordingExecutor
from xirang_service.pool.store import PoolStore

HOUR = 3600.0
T0 = 1_700_000_000.0
CLUSTER = """
nodes: [{name: here, type: cpu, devices: 2}]
projects: [{name: nlp, guaranteed: 2, team: research}]
"""


class Clocks:
    """The executor's clock, and the service's, which learns of a run's end ``lag`` later."""

    def __init__(self) -> None:
        self.now, self.lag = T0, 0.0

    def executor(self) -> float:
        return self.now

    def service(self) -> float:
        return self.now + self.lag


class InProcess:
    """The local scheduler's one-worker path (the run in this process), without its device
    probing, which needs a composed run config this test has no use for."""

    def __init__(self, worker_quota: list[float]) -> None:
        assert worker_quota == []  # scheduler=pool's default: no quota

    def launch(self, job: JobSpec, entrypoint) -> None:
        entrypoint(job.run_dir)


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    clocks = Clocks()
    costs = CostStore(tmp_path / "cost.db")
    budgets = PoolBudgets(Governor(costs), Meter(PriceBook({"cpu": 1.0})))
    service = PoolService(
        PoolStore(tmp_path / "pool.db"),
        tmp_path / "cluster.yaml",
        operator_token="op-token",
        clock=clocks.service,
        budgets=budgets,
    )
    server = serve(service, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    token = PoolClient(url, "op-token").call("PUT", "/v1/projects/nlp", {})["token"]
    monkeypatch.setenv("XIRANG_POOL_TOKEN", token)
    fake_time = SimpleNamespace(time=clocks.executor, sleep=time.sleep)
    monkeypatch.setattr(pool_scheduler, "time", fake_time)
    monkeypatch.setattr(local_scheduler, "LocalScheduler", InProcess)
    yield SimpleNamespace(service=service, url=url, clocks=clocks, budgets=budgets, costs=costs)
    server.shutdown()
    thread.join()
    service.store.close()
    costs.close()


def test_the_local_executor_reports_idle_time_and_low_utilisation_with_costs(pool, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def train(folder: str) -> None:
        """Two hours on two devices, ten minutes of it training with one worker; the pool
        hears of the end half an hour late (the submitter hung on to the allocation)."""
        pool.clocks.now += 2 * HOUR
        summary = {"wall_time_s": 600.0, "world_size": 1}
        (Path(folder) / "summary.json").write_text(json.dumps(summary))
        pool.clocks.lag = 0.5 * HOUR

    executor = PoolScheduler(url=pool.url, cards=2, poll_s=0.05)
    executor.launch(JobSpec(str(run_dir), nproc=1, project="nlp"), train)

    (job,) = pool.service.jobs(OPERATOR)
    assert job["state"] == "done"
    assert job["payload"]["run_ended_at"] == T0 + 2 * HOUR
    assert job["payload"]["utilisation"] == pytest.approx(600 / (2 * 2 * HOUR), abs=1e-6)

    now = pool.clocks.service()
    pool.budgets.record(read_state(pool.service.store, now, usage=True), now)
    (charge,) = pool.costs.charges()
    assert charge.amount_micro == 3_500_000  # 2 devices x 2.5 h x 1.0 x 0.7 (guaranteed)
    assert charge.idle_after_s == 0.5 * HOUR and charge.team == "research"
    found = {f.kind: f for f in findings.find([charge])}
    assert found["idle_after_end"].cost_micro == 700_000  # the last half hour of 2.5 h
    assert found["idle_after_end"].seconds == 0.5 * HOUR
    # busy: 10 device-minutes of the 4 device-hours before the end; the rest is idle
    assert found["low_utilisation"].cost_micro == charge.idle_micro
    assert charge.idle_micro == pytest.approx(3_500_000 * (1 - 300 / 9000), abs=2)


def test_a_report_the_meter_cannot_use_is_refused(pool):
    client = PoolClient(pool.url, "op-token")
    job = client.submit(project="nlp", cards=1)
    with pytest.raises(PoolError, match="utilisation must be between 0 and 1"):
        client.complete(job["id"], ok=True, utilisation=1.5)
    with pytest.raises(PoolError, match="unknown usage field 'gpu_util'"):
        client.complete(job["id"], ok=True, gpu_util=0.5)
    assert client.job(job["id"])["state"] == "running"  # nothing was changed


def test_a_run_without_a_summary_reports_its_end_but_no_utilisation(tmp_path):
    assert run_usage(tmp_path, devices=2, started=0.0, ended=100.0) == {"run_ended_at": 100.0}
    (tmp_path / "summary.json").write_text(json.dumps({"wall_time_s": 90.0, "world_size": 4}))
    assert run_usage(tmp_path, 2, 0.0, 100.0) == {"run_ended_at": 100.0, "utilisation": 1.0}


def test_the_seconds_an_executor_needs_to_report_an_end_are_no_finding(pool):
    client = PoolClient(pool.url, "op-token")
    job = client.submit(project="nlp", cards=2)
    pool.clocks.now += 2 * HOUR
    client.complete(job["id"], ok=True, run_ended_at=pool.clocks.now - 3.0, utilisation=0.9)
    now = pool.clocks.service()
    pool.budgets.record(read_state(pool.service.store, now, usage=True), now)
    (charge,) = pool.costs.charges()
    assert charge.idle_after_s == 3.0
    assert findings.find([charge]) == []


class Batch(RecordingExecutor):
    """A cluster executor (as Slurm's): it notices ends when polled and says when they were."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: dict[int, float] = {}

    def poll(self) -> list[tuple[int, bool]]:
        return [(job_id, True) for job_id in self.ends]

    def usage(self, job_id: int) -> dict[str, float]:
        return {"run_ended_at": self.ends.pop(job_id)}


def test_a_cluster_executors_end_time_makes_the_idle_after_finding(tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    clock = Clocks()
    costs = CostStore(tmp_path / "cost.db")
    executor = Batch()
    service = PoolService(
        PoolStore(tmp_path / "pool.db"),
        tmp_path / "cluster.yaml",
        executor=executor,
        clock=clock.service,
        budgets=PoolBudgets(Governor(costs), Meter(PriceBook({"cpu": 1.0}))),
    )
    try:
        job = service.submit(OPERATOR, {"project": "nlp", "cards": 2})
        clock.now += 2 * HOUR
        executor.ends[job["id"]] = clock.now - 0.5 * HOUR  # the pool was told 30 min late
        service.tick()
        assert service.job(OPERATOR, job["id"])["payload"]["run_ended_at"] == T0 + 1.5 * HOUR
        (charge,) = costs.charges()
        (finding,) = findings.find([charge])
        assert (finding.kind, finding.cost_micro) == ("idle_after_end", 700_000)  # 1/4 of 2.80
    finally:
        service.store.close()
        costs.close()


def test_a_pool_runs_summary_states_the_pools_charge_for_its_job(pool, tmp_path):
    """One job, one amount: the summary's cost is what the pool charges (and the cost store,
    behind ``xirang cost report``, holds), not the run's own quote of its training time."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def train(folder: str) -> None:
        """An hour on two devices, of which the loop trained 20 minutes (quoted by cost=flat)."""
        pool.clocks.now += HOUR
        summary = {"wall_time_s": 1200.0, "world_size": 2, "tokens": 4_000_000}
        summary |= {"first_loss": 5.0, "final_loss": 3.0}
        summary |= cost_fields(4_000_000, 2.0, 0.033333, "USD", "flat")
        (Path(folder) / "summary.json").write_text(json.dumps(summary))

    PoolScheduler(url=pool.url, cards=2, poll_s=0.05).launch(
        JobSpec(str(run_dir), nproc=2, project="nlp"), train
    )
    now = pool.clocks.service()
    pool.budgets.record(read_state(pool.service.store, now, usage=True), now)
    (charge,) = pool.costs.charges()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost"]["amount"] == charge.amount_micro / 1e6 == 1.4  # 2 x 1 h x 0.7
    assert summary["cost"]["policy"] == "pool" and summary["cost"]["device_s"] == 2 * HOUR
    assert summary["tokens_per_cost"] == round(4_000_000 / 1.4, 1)
    assert summary["loss_drop_per_cost"] == round(2.0 / 1.4, 4)
