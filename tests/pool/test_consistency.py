"""State that stays consistent: a change reaches memory only once the store committed it, a
refused write changes nothing (StoreUnavailable, 503), and a restart sets aside the stored rows
it cannot use instead of crashing. Real stores (an SQLite file; PostgreSQL where marked); the
failures are real ones (a string the database cannot encode) or one refused statement."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.pool.consistency import assert_consistent, failing, snapshot
from xirang_service.cost.governor import Governor, PoolBudgets
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool.errors import PoolError, StoreUnavailable
from xirang_service.pool.service import OPERATOR, PoolService, RecordingExecutor
from xirang_service.pool.store import PoolStore

SURROGATE = "\ud800"  # valid JSON ("\ud800"), not encodable as UTF-8


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000.0

    def __call__(self) -> float:
        return self.now


class Pool:
    """A service over a real store, the recording executor and a hand-moved clock."""

    def __init__(self, location: str, cluster: Path | None, budgets: PoolBudgets | None = None):
        self.location, self.clock, self.executor = location, Clock(), RecordingExecutor()
        self.budgets = budgets
        self.service = self.start(cluster)

    def start(self, cluster: Path | None = None) -> PoolService:
        return PoolService(
            PoolStore(self.location),
            cluster,
            executor=self.executor,
            clock=self.clock,
            budgets=self.budgets,
        )

    def restart(self) -> PoolService:
        self.service.store.close()
        self.service = self.start()
        return self.service

    def submit(self, project: str = "nlp", cards: int = 4, **body: object) -> dict:
        return self.service.submit(OPERATOR, {"project": project, "cards": cards, **body})


@pytest.fixture
def pool(store_location: str, cluster_file: Path) -> Iterator[Pool]:
    made = Pool(store_location, cluster_file)
    yield made
    made.service.store.close()


def test_an_unencodable_job_name_is_a_503_that_changes_nothing(pool: Pool) -> None:
    """Today: the job ran in memory, unstored (unbilled); here neither memory nor store has it,
    the executor was not told to start it, and the next request and a restart serve."""
    before = snapshot(pool.service.engine)
    with pytest.raises(StoreUnavailable, match="refused the write") as err:
        pool.submit(name=SURROGATE)
    assert err.value.status == 503
    assert snapshot(pool.service.engine) == before and pool.executor.started == []
    assert pool.service.store.jobs() == []
    assert_consistent(pool.service)
    job = pool.submit()
    assert job["id"] == 1 and job["state"] == "running"
    assert pool.restart().job(OPERATOR, 1)["devices"] == job["devices"]


@pytest.mark.service
def test_a_nul_in_a_name_on_postgresql_changes_nothing(postgres_cluster: str, cluster_file):
    from tests.pool import postgres

    made = Pool(postgres.fresh_database(postgres_cluster, "pool_nul"), cluster_file)
    try:
        with pytest.raises(StoreUnavailable):
            made.submit(name="a\x00b")
        assert made.service.jobs(OPERATOR) == [] and made.service.store.jobs() == []
        assert made.submit()["state"] == "running"
        assert_consistent(made.service)
    finally:
        made.service.store.close()


def test_a_refused_cancel_leaves_the_job_running_in_memory_store_and_executor(pool) -> None:
    """Today: the cancel was reported done and the executor stopped the job, but the store
    kept it running (and a restart brought it back)."""
    job = pool.submit()
    failing(pool.service).fail_in = 1
    with pytest.raises(StoreUnavailable):
        pool.service.cancel(OPERATOR, job["id"])
    assert pool.service.job(OPERATOR, job["id"])["state"] == "running"
    assert pool.executor.stopped == []
    assert_consistent(pool.service)
    assert pool.service.cancel(OPERATOR, job["id"])["state"] == "cancelled"
    assert pool.executor.stopped == [job["id"]]
    assert pool.restart().job(OPERATOR, job["id"])["state"] == "cancelled"


def test_a_refused_preemption_never_gives_one_device_to_two_jobs(pool) -> None:
    """Today: memory moved the devices to the preempting job while the store kept the victim
    on them, so the restart refused (`device 0 on ... is not free`)."""
    low = pool.submit("cv", 8, priority="low")
    with pytest.raises(StoreUnavailable):
        pool.submit("nlp", 4, priority="high", name=SURROGATE)
    assert pool.service.job(OPERATOR, low["id"])["devices"] == low["devices"]
    assert pool.executor.stopped == []
    assert_consistent(pool.service)
    again = pool.restart()
    assert again.restored == 1 and again.job(OPERATOR, low["id"])["state"] == "running"


def test_a_refused_drain_keeps_the_node_and_its_jobs(pool) -> None:
    job = pool.submit(cards=8)
    with pytest.raises(StoreUnavailable):
        pool.service.drain(OPERATOR, "n-0000", SURROGATE)
    assert pool.service.status(OPERATOR)["drained"] == []
    assert pool.service.job(OPERATOR, job["id"])["requeues"] == 0
    assert pool.executor.stopped == []
    assert_consistent(pool.service)


def test_a_refused_quota_edit_creates_no_project(pool) -> None:
    with pytest.raises(StoreUnavailable):
        pool.service.set_quota(OPERATOR, "ghost", {"team": SURROGATE})
    assert "ghost" not in pool.service.engine.quotas.projects
    assert_consistent(pool.service)


def test_a_refused_tick_keeps_the_reported_end_and_stores_it_next_time(pool) -> None:
    job = pool.submit()
    ends = [(job["id"], True)]
    pool.executor.poll = lambda: [ends.pop()] if ends else []  # type: ignore[method-assign]
    failing(pool.service).fail_in = 1
    pool.service.tick()  # logged, not raised: the serve loop keeps going
    assert pool.service.job(OPERATOR, job["id"])["state"] == "running"
    assert_consistent(pool.service)
    pool.service.tick()
    assert pool.service.job(OPERATOR, job["id"])["state"] == "done"
    assert_consistent(pool.service)


def _corrupt(path: str, *statements: str) -> None:
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)


def test_a_restart_sets_aside_rows_it_cannot_use_and_the_rest_serves(tmp_path, cluster_file):
    location = str(tmp_path / "pool.db")
    costs = CostStore(tmp_path / "cost.db")
    made = Pool(location, cluster_file, PoolBudgets(Governor(costs), Meter(PriceBook({"gpu": 1}))))
    ids = [made.submit("nlp", 1)["id"] for _ in range(5)] + [made.submit("cv", 3)["id"]]
    made.service.store.close()
    _corrupt(
        location,
        f"UPDATE jobs SET state = 'bogus' WHERE id = {ids[0]}",
        f"UPDATE jobs SET devices = '[0' WHERE id = {ids[1]}",
        f"""UPDATE jobs SET payload = '{{"utilisation": "abc"}}' WHERE id = {ids[2]}""",
        f"UPDATE jobs SET devices = (SELECT devices FROM jobs WHERE id = {ids[3]}) "
        f"WHERE id = {ids[5]}",  # a device held twice: the job restored first keeps it
        "INSERT INTO jobs SELECT 99, name, 'nobody', job_class, cards, priority, 'queued', "
        "submitted, NULL, NULL, attained, '', '[]', 0, 0, 0, '{}', 0 FROM jobs LIMIT 1",
        "INSERT INTO projects (name, team, guaranteed, borrow_limit, token_hash, max_priority, "
        "run_as) VALUES ('broken', 'default', 'many', NULL, '', 1, '')",
    )
    service = made.start()
    aside = {(r["kind"], r["ref"]): r["reason"] for r in service.status(OPERATOR)["set_aside"]}
    assert set(aside) == {
        *(("job", str(i)) for i in (*ids[:3], ids[5], 99)),
        ("project", "broken"),
    }
    assert "bogus" in aside[("job", str(ids[0]))] and "abc" in aside[("job", str(ids[2]))]
    assert "held by another job" in aside[("job", str(ids[5]))]
    assert service.restored == 2 and service.status(OPERATOR)["types"]["gpu"]["free"] == 6
    made.clock.now += 3600
    service.tick()  # meters the pool: the stored bad utilisation no longer reaches the meter
    assert costs.spent_micro("project", "nlp") > 0
    assert service.submit(OPERATOR, {"project": "nlp", "cards": 1})["id"] == 100
    assert_consistent(service)
    service.store.close()
    costs.close()


def test_a_restart_sets_aside_node_and_device_rows_it_cannot_use(tmp_path, cluster_file):
    """Today a corrupt node row (or a device row of no node) stopped the restart; here that
    node and its running job are set aside and reported, and the other node serves."""
    made = Pool(str(tmp_path / "pool.db"), cluster_file)
    lost, kept = made.submit("nlp", 4), made.submit("cv", 2)
    [bad] = {made.service.engine.cluster.node_of(d).name for d in lost["devices"]}
    made.service.store.close()
    _corrupt(
        made.location,
        f"UPDATE nodes SET devices = 'many' WHERE name = '{bad}'",
        "INSERT INTO devices VALUES (100, 'ghost', 'gpu', 0, NULL)",
    )
    service = made.start()
    aside = {(r["kind"], r["ref"]): r["reason"] for r in service.status(OPERATOR)["set_aside"]}
    assert set(aside) == {("node", bad), ("device", "100"), ("job", str(lost["id"]))}
    assert "devices holds 'many'" in aside[("node", bad)]
    assert "'ghost' is not in the nodes table" in aside[("device", "100")]
    assert service.job(OPERATOR, kept["id"])["state"] == "running" and service.restored == 1
    assert bad not in {n["name"] for n in service.store.nodes()}
    assert {d["node"] for d in service.devices(OPERATOR)} == {
        n["name"] for n in service.store.nodes()
    }
    assert service.submit(OPERATOR, {"project": "nlp", "cards": 2})["state"] == "running"
    assert service.status(OPERATOR)["types"]["gpu"]["free"] == 0
    assert_consistent(service)
    service.store.close()
    again = made.start()  # the set-aside rows stay aside, reported once
    assert len(again.status(OPERATOR)["set_aside"]) == 3
    assert_consistent(again)
    again.store.close()


def test_payload_fields_the_pool_reads_are_checked_at_submit(pool) -> None:
    for payload, message in (
        ({"utilisation": "abc"}, "utilisation must be a number"),
        ({"utilisation": 2}, "between 0 and 1"),
        ({"interruptible": "yes"}, "interruptible must be true or false"),
        (["not", "an", "object"], "JSON object"),
    ):
        with pytest.raises(PoolError, match=message) as err:
            pool.submit(payload=payload)
        assert err.value.status == 400
    assert pool.submit(payload={"utilisation": 0.5, "note": "free text"})["state"] == "running"


def test_a_fractional_usage_bucket_ends_and_a_tiny_one_is_refused(pool) -> None:
    """Today `bucket=0.1` at a real clock stepped a float that stopped moving: a CPU forever."""
    job = pool.submit()
    pool.clock.now += 1
    pool.service.cancel(OPERATOR, job["id"])
    answer: list = []
    worker = threading.Thread(
        target=lambda: answer.append(pool.service.usage(OPERATOR, 0, 2e9, 0.1)), daemon=True
    )
    worker.start()
    worker.join(10)
    assert answer, "usage with bucket=0.1 did not return"
    assert len(answer[0]) == 10 and sum(u["device_seconds"] for u in answer[0]) == 4
    for bucket in (1e-9, 0, -1, float("nan"), "1"):
        with pytest.raises(PoolError, match="bucket") as err:
            pool.service.usage(OPERATOR, 0, 2e9, bucket)  # type: ignore[arg-type]
        assert err.value.status == 400


def test_a_project_sees_its_own_job_ids_on_devices_and_not_others(pool) -> None:
    mine, theirs = pool.submit("nlp", 4), pool.submit("cv", 4)
    rows = {d["id"]: d for d in pool.service.devices("nlp")}
    assert {rows[d]["job_id"] for d in mine["devices"]} == {mine["id"]}
    assert {rows[d]["job_id"] for d in theirs["devices"]} == {None}
    assert all(rows[d]["used"] for d in (*mine["devices"], *theirs["devices"]))
    every = {d["id"]: d["job_id"] for d in pool.service.devices(OPERATOR)}
    assert {every[d] for d in theirs["devices"]} == {theirs["id"]}


def test_store_files_are_readable_by_their_owner_only(tmp_path) -> None:
    store = PoolStore(tmp_path / "pool.db")
    store.set_meta("x", "y")
    costs = CostStore(tmp_path / "cost.db")
    for name in ("pool.db", "pool.db-wal", "cost.db"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600, name
    store.close()
    costs.close()


class PoolMachine(RuleBasedStateMachine):
    """Random requests, ticks, restarts and refused writes; after each step memory equals a
    fresh load of the store, and a request that failed (4xx or 503) changed nothing."""

    location: Callable[[], str]  # a fresh store per run (set by the test)

    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="xirang-machine-"))
        (self.folder / "cluster.yaml").write_text(MACHINE_CLUSTER)
        self.pool = Pool(self.location(), self.folder / "cluster.yaml")
        self.ended: list[tuple[int, bool]] = []
        self.pool.executor.poll = self._poll  # type: ignore[method-assign]
        self.db = failing(self.pool.service)

    def _poll(self) -> list[tuple[int, bool]]:
        ended, self.ended = self.ended, []
        return ended

    def _request(self, call: Callable[[], object]) -> None:
        before = snapshot(self.pool.service.engine)
        try:
            call()
        except PoolError:  # refused (4xx) or not stored (503): nothing changed
            assert snapshot(self.pool.service.engine) == before

    @rule(n=st.integers(1, 4))
    def refuse_a_write(self, n: int) -> None:
        self.db.fail_in = n

    @rule(
        project=st.sampled_from(["nlp", "cv"]),
        cards=st.integers(1, 8),
        priority=st.sampled_from(["low", "normal", "high", "critical"]),
        name=st.sampled_from(["job", SURROGATE]),
        payload=st.sampled_from([{}, {"utilisation": 0.5}, {"utilisation": "abc"}]),
        as_project=st.booleans(),
    )
    def submit(self, project, cards, priority, name, payload, as_project) -> None:
        who = project if as_project else OPERATOR
        body = {"project": project, "cards": cards, "priority": priority, "name": name}
        self._request(lambda: self.pool.service.submit(who, {**body, "payload": payload}))

    @rule(job=st.integers(1, 12))
    def cancel(self, job: int) -> None:
        self._request(lambda: self.pool.service.cancel(OPERATOR, job))

    @rule(job=st.integers(1, 12), ok=st.booleans())
    def complete(self, job: int, ok: bool) -> None:
        self._request(lambda: self.pool.service.complete(OPERATOR, job, ok, {"utilisation": 1}))

    @rule(node=st.sampled_from(["n-0000", "n-0001"]), reason=st.sampled_from(["ecc", SURROGATE]))
    def drain(self, node: str, reason: str) -> None:
        self._request(lambda: self.pool.service.drain(OPERATOR, node, reason))

    @rule(node=st.sampled_from(["n-0000", "n-0001"]))
    def undrain(self, node: str) -> None:
        self._request(lambda: self.pool.service.undrain(OPERATOR, node))

    @rule(
        project=st.sampled_from(["nlp", "cv", "ml"]),
        guaranteed=st.integers(0, 8),
        highest=st.sampled_from(["normal", "high"]),
        team=st.sampled_from(["research", SURROGATE]),
    )
    def quota(self, project, guaranteed, highest, team) -> None:
        body = {"guaranteed": guaranteed, "max_priority": highest, "team": team}
        self._request(lambda: self.pool.service.set_quota(OPERATOR, project, body))

    @rule(seconds=st.floats(0, 3600), ends=st.integers(0, 2))
    def tick(self, seconds: float, ends: int) -> None:
        self.pool.clock.now += seconds
        running = sorted(i for _, i in self.pool.service.engine.running)
        self.ended += [(i, i % 2 == 0) for i in running[:ends]]
        self.pool.service.tick()

    @rule()
    def restart(self) -> None:
        self.db.fail_in = 0
        self.pool.restart()
        self.db = failing(self.pool.service)

    @invariant()
    def memory_equals_the_store(self) -> None:
        armed, self.db.fail_in = self.db.fail_in, 0  # the check itself writes nothing
        assert_consistent(self.pool.service)
        self.db.fail_in = armed

    def teardown(self) -> None:
        self.pool.service.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)


MACHINE_CLUSTER = """
groups:
  - {type: gpu, nodes: 2, devices: 4, prefix: n}
projects:
  - {name: nlp, guaranteed: 4}
  - {name: cv, guaranteed: 4, max_priority: high}
"""


def _on(location: Callable[[], str]) -> type[PoolMachine]:
    """The machine over stores made by ``location`` (one per run)."""
    return type("Machine", (PoolMachine,), {"location": staticmethod(location)})


MACHINE_SETTINGS = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_random_requests_with_refused_writes_keep_memory_equal_to_the_store(tmp_path) -> None:
    runs = itertools.count()
    run_state_machine_as_test(
        _on(lambda: str(tmp_path / f"pool-{next(runs)}.db")), settings=MACHINE_SETTINGS
    )


@pytest.mark.service
def test_the_same_on_postgresql(postgres_cluster: str) -> None:
    from tests.pool import postgres

    runs = itertools.count()
    machine = _on(lambda: postgres.fresh_database(postgres_cluster, f"machine_{next(runs)}"))
    run_state_machine_as_test(machine, settings=settings(MACHINE_SETTINGS, max_examples=8))
