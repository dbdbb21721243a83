"""A job that allows mixing may span device types, its logical cards converted per type."""

from __future__ import annotations

import pytest

from xirang_service.pool import clusterfile
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.errors import PoolError
from xirang_service.pool.policy import load_policy
from xirang_service.pool.sim.simulator import BALANCE_EFFICIENCY, Result, Simulator
from xirang_service.pool.sim.traces import TraceJob
from xirang_service.pool.store import PoolStore

# "fast" devices are worth 2 cards each, "slow" ones 1: 4 of each is 12 cards in all
DATA = {
    "groups": [
        {"type": "slow", "nodes": 1, "devices": 4, "prefix": "s"},
        {"type": "fast", "nodes": 1, "devices": 4, "prefix": "f"},
    ],
    "throughputs": {"reference": "slow", "speed": {"slow": 1.0, "fast": 2.0}},
    "projects": [{"name": "a", "guaranteed": 12}],
}


def _engine() -> PoolEngine:
    cluster, throughputs, quotas = clusterfile.build(dict(DATA))
    return PoolEngine(cluster, throughputs, load_policy("priority"), quotas)


def _types(engine: PoolEngine, devices: tuple[int, ...]) -> list[str]:
    return sorted(engine.cluster.node_of(d).type for d in devices)


def test_a_mixing_job_spans_types_with_cards_converted_per_type() -> None:
    engine = _engine()
    job = engine.submit("a", 10, 0.0, allow_mixing=True)  # neither type alone holds 10 cards
    engine.schedule(0.0)
    assert job.state.value == "running" and job.device_type == "fast+slow"
    assert _types(engine, job.devices) == ["fast"] * 4 + ["slow"] * 2  # 4 x 2 + 2 x 1 = 10
    engine.complete(job.id, 100.0)
    shares = {s.device_type: (s.devices, s.cards) for s in engine.segments}
    assert shares == {"fast": (4, 8), "slow": (2, 2)}
    assert engine.cluster.free_devices() == 8


def test_homogeneous_is_preferred_and_only_a_mixing_job_spans_types() -> None:
    engine = _engine()
    small = engine.submit("a", 6, 0.0, allow_mixing=True)  # fits on 3 fast devices alone
    engine.schedule(0.0)
    assert small.device_type == "fast" and len(small.devices) == 3
    strict = engine.submit("a", 8, 1.0)  # 4 fast devices, only 1 free; 8 slow never fit
    mixing = engine.submit("a", 6, 1.0, allow_mixing=True)  # 1 fast (2 cards) + 4 slow
    engine.schedule(1.0)
    assert strict.state.value == "queued"
    assert mixing.device_type == "fast+slow"
    assert _types(engine, mixing.devices) == ["fast"] + ["slow"] * 4
    with pytest.raises(PoolError, match="can never fit"):
        engine.submit("a", 10, 2.0)  # no single type holds 10 cards, and it may not mix


def test_a_mixed_job_is_preempted_from_either_type() -> None:
    engine = _engine()
    engine.quotas.projects["a"].guaranteed = 0
    engine.set_quota(engine.quotas.projects["a"])
    low = engine.submit("a", 10, 0.0, priority=0, allow_mixing=True)
    engine.schedule(0.0)
    assert low.borrowed and low.device_type == "fast+slow"
    urgent = engine.submit("a", 4, 1.0, priority=3)  # needs the 2 slow devices low holds too
    engine.schedule(1.0)
    assert urgent.state.value == "running" and low.state.value == "queued"
    assert low.preemptions == 1 and engine.cluster.free_devices() == 8 - len(urgent.devices)


def test_mixing_survives_a_restart_of_either_store(store_location: str) -> None:
    engine, store = _engine(), PoolStore(store_location)
    store.save_cluster(engine.cluster)
    job = engine.submit("a", 10, 0.0, allow_mixing=True)
    engine.schedule(0.0)
    store.persist(engine, [job], engine.events)
    again = _engine()
    assert store.load_into(again, 5.0) == 1
    back = again.jobs[job.id]
    assert back.allow_mixing and back.devices == job.devices and back.device_type == "fast+slow"
    again.complete(job.id, 10.0)
    assert again.cluster.free_devices() == 8
    store.close()


def test_allow_mixing_must_be_a_boolean(tmp_path) -> None:
    from xirang_service.pool.service import OPERATOR, PoolService

    path = tmp_path / "cluster.yaml"
    path.write_text(__import__("yaml").safe_dump(DATA))
    service = PoolService(PoolStore(tmp_path / "pool.db"), path, "priority", "op")
    with pytest.raises(PoolError, match="allow_mixing must be true or false"):
        service.submit(OPERATOR, {"project": "a", "cards": 2, "allow_mixing": "yes"})
    made = service.submit(OPERATOR, {"project": "a", "cards": 10, "allow_mixing": True})
    assert made["allow_mixing"] and made["device_type"] == "fast+slow"


def _replay(mixing: str, jobs: list[TraceJob], **settings: float) -> Result:
    return Simulator(dict(DATA), "priority", mixing=mixing, **settings).run(jobs)


def test_the_simulator_runs_a_mixed_job_at_its_split_s_pace() -> None:
    """10 cards for 600 s: no single type holds it (off: refused); mixed on 4 fast and 2 slow
    devices it runs at the slowest device's pace when the batch is split evenly (6 devices x
    1 card/s) and at the sum of their speeds when balanced (10 cards/s), times the balanced
    run's measured efficiency (0.95 unless told)."""
    jobs = [TraceJob(0.0, 600.0, 10, "a")]
    assert _replay("off", jobs).rejected == 1
    assert _replay("even", jobs).jct_by_job == {1: pytest.approx(1000.0)}
    ideal = _replay("balanced", jobs, balance_efficiency=1.0)
    assert ideal.jct_by_job == {1: pytest.approx(600.0)}
    measured = _replay("balanced", jobs).jct_by_job
    assert measured == {1: pytest.approx(600.0 / BALANCE_EFFICIENCY)}


def test_a_mixing_mode_the_simulator_does_not_know_is_refused() -> None:
    with pytest.raises(PoolError, match="off, even, balanced"):
        _replay("always", [])
