"""Retries and crashes around a job's life: cancelling twice answers the same (a client retrying
after a lost answer), and an executor's intent (the name it will submit a job under) is in the
store before it submits, so a pool that dies before storing the job's handle finds the job
again (the Slurm side: tests/plugins/xirang_slurm/test_pool_orphans_slurm.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.pool.web import OPERATOR, served
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import Job
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore


def test_cancelling_twice_answers_the_same(store_location: str, cluster_file: Path) -> None:
    with served(store_location, cluster_file) as pool:
        nlp = pool.client("nlp")
        running = nlp.submit(cards=4)
        queued = nlp.submit(cards=8)
        for job in (queued, running):
            first = nlp.cancel(job["id"])
            assert first["state"] == "cancelled"
            assert nlp.cancel(job["id"]) == first  # the retry changes nothing
        done = nlp.submit(cards=1)
        nlp.complete(done["id"], True)
        with pytest.raises(PoolError, match=r"already ended \(done\)") as err:
            nlp.cancel(done["id"])
        assert err.value.status == 409
        with pytest.raises(PoolError, match="no job") as err:
            pool.client("cv").cancel(running["id"])
        assert err.value.status == 404
        events = pool.service.store.events()
        assert sum(e["kind"] == "cancelled" for e in events) == 2


class IntentExecutor:
    """An executor that names its submissions in advance, and notes what the store held for
    each job when it was asked to start it."""

    name = "intents"

    def __init__(self) -> None:
        self.store: PoolStore | None = None
        self.stored_at_start: dict[int, str | None] = {}

    def intent(self, job: Job) -> str:
        return f"xirang-{job.id}-intent"

    def start(self, job: Job, nodes: list[str], leaves: int = 1, account: str = "") -> str:
        assert self.store is not None
        self.stored_at_start[job.id] = self.store.handles().get(job.id)
        return f"{1000 + job.id}"

    def stop(self, job: Job, reason: str) -> None:
        pass

    def poll(self) -> list[tuple[int, bool]]:
        return []


def pool_with(executor: IntentExecutor, tmp_path: Path, cluster_file: Path) -> PoolService:
    store = PoolStore(str(tmp_path / "pool.db"))
    executor.store = store
    return PoolService(store, cluster_file, "priority", OPERATOR, executor)


def test_the_intent_is_stored_before_the_executor_submits(
    tmp_path: Path, cluster_file: Path
) -> None:
    executor = IntentExecutor()
    pool = pool_with(executor, tmp_path, cluster_file)
    try:
        job = pool.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1})
        assert executor.stored_at_start == {job["id"]: f"xirang-{job['id']}-intent"}
        assert pool.store.handles() == {job["id"]: f"{1000 + job['id']}"}  # then its id
    finally:
        pool.store.close()


def test_a_start_whose_intent_cannot_be_stored_is_not_submitted(
    tmp_path: Path, cluster_file: Path
) -> None:
    """Submitting without a stored intent could leave a job running that no restart finds."""
    executor = IntentExecutor()
    pool = pool_with(executor, tmp_path, cluster_file)

    def refuse(*_: Any) -> None:
        raise PoolError("the store is away", 503)

    try:
        pool.store.save_handle = refuse  # type: ignore[method-assign]
        job = pool.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1})
        assert executor.stored_at_start == {}
        pool.tick()
        assert pool.job(OPERATOR_WHO, job["id"])["state"] == "failed"
    finally:
        pool.store.close()
