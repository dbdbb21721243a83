"""Incremental pool metering: each tick reads only what changed, and its totals always equal a
full recomputation over the pool's whole history; team amounts add up to the total exactly."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from xirang_service.console.state import read_state
from xirang_service.cost import report
from xirang_service.cost.governor import Governor, PoolBudgets
from xirang_service.cost.meter import Meter
from xirang_service.cost.pool_metering import PoolMetering
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore

from .pools import Clock

CLUSTER = """
groups:
  - {type: a100, nodes: 2, devices: 4}
  - {type: v100, nodes: 1, devices: 4}
throughputs: {reference: a100, speed: {a100: 1.0, v100: 0.6}}
projects:
  - {name: nlp, guaranteed: 4, team: research}
  - {name: cv, guaranteed: 2, team: product}
  - {name: ads, guaranteed: 0, team: product}
"""
BOOK = PriceBook.from_settings(
    {
        "prices": {"a100": 2.5, "v100": 1.1},
        "windows": [{"name": "offpeak", "start": 22, "end": 6, "multiplier": 0.6}],
        "watts": {"a100": 400},
        "price_per_kwh": 0.3,
    }
)

submit = st.tuples(
    st.just("submit"),
    st.sampled_from(["nlp", "cv", "ads"]),
    st.integers(1, 6),
    st.sampled_from(["low", "normal", "high"]),
)
end = st.tuples(
    st.sampled_from(["complete", "cancel"]),
    st.integers(0, 20),
    st.floats(0.0, 1.0),
    st.floats(0.0, 7200.0),
)
wait = st.tuples(st.just("wait"), st.floats(1.0, 5 * 3600.0))
steps = st.lists(st.one_of(submit, end, wait, st.just(("tick",))), min_size=1, max_size=30)


def apply(service: PoolService, clock: Clock, step: tuple) -> None:
    """One request to the pool, as a client or executor would make it."""
    kind = step[0]
    if kind == "submit":
        _, project, cards, priority = step
        service.submit(OPERATOR, {"project": project, "cards": cards, "priority": priority})
    elif kind in ("complete", "cancel"):
        _, pick, utilisation, ended_ago = step
        running = [j["id"] for j in service.jobs(OPERATOR, "running")]
        if not running:
            return
        job_id = running[pick % len(running)]
        if kind == "cancel":
            service.cancel(OPERATOR, job_id)
            return
        started = service.job(OPERATOR, job_id)["started"]
        ended = max(started, clock.now - ended_ago)
        usage = {"utilisation": utilisation, "run_ended_at": ended}
        service.complete(OPERATOR, job_id, True, usage)
    elif kind == "wait":
        clock.now += step[1]
    else:
        service.tick()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
@example(
    [("submit", "nlp", 1, "low")] * 2
    + [("submit", "nlp", 2, "low"), ("submit", "nlp", 4, "low")]
    + [("submit", "nlp", 1, "low")] * 3
    + [("wait", 840.0)]
)  # the last tick starts a job after metering: its allocation opens at that tick's now
def test_incremental_metering_equals_a_full_recomputation(plan: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "cluster.yaml").write_text(CLUSTER)
        clock = Clock(1_700_000_000.0)
        costs = CostStore(root / "cost.db")
        meter = Meter(BOOK, energy=True)
        service = PoolService(
            PoolStore(root / "pool.db"),
            root / "cluster.yaml",
            clock=clock,
            budgets=PoolBudgets(Governor(costs), meter),
        )
        try:
            for step in plan:
                with contextlib.suppress(PoolError):  # e.g. too big for the pool: refused
                    apply(service, clock, step)
            clock.now += 60.0
            service.tick()  # meters, then schedules: meter the state it left, as the next would
            now = clock.now
            service.budgets.meter_pool(service.store, now)
            incremental = {c.ref: c for c in costs.charges()}
            full = {c.ref: c for c in meter.pool_charges(read_state(service.store, now, True), now)}
            assert incremental == full
            teams = report.group(incremental.values(), "team")
            assert sum(r.amount_micro for r in teams.rows) == teams.total.amount_micro
            assert teams.total.amount_micro == sum(c.amount_micro for c in full.values())
        finally:
            service.store.close()
            costs.close()


def test_a_tick_reads_only_the_segments_closed_since_the_last(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    clock = Clock(1_700_000_000.0)
    service = PoolService(PoolStore(tmp_path / "pool.db"), tmp_path / "cluster.yaml", clock=clock)
    metering = PoolMetering(Meter(BOOK), overlap_s=60.0)
    try:
        first = service.submit(OPERATOR, {"project": "nlp", "cards": 4})
        clock.now += 3600
        service.complete(OPERATOR, first["id"], True)
        assert [c.ref for c in metering.charges(service.store, clock.now)] == [
            f"{first['id']}@{first['started']:.3f}"
        ]
        clock.now += 30
        metering.charges(service.store, clock.now)  # within the overlap: read again, replaced
        clock.now += 90
        metering.charges(service.store, clock.now)
        clock.now += 3600
        second = service.submit(OPERATOR, {"project": "cv", "cards": 2})
        clock.now += 600
        refs = [c.ref for c in metering.charges(service.store, clock.now)]
        assert refs == [f"{second['id']}@{second['started']:.3f}"]  # the first is not re-read
    finally:
        service.store.close()


def test_a_running_job_on_two_device_types_is_charged_per_type(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    clock = Clock(1_700_000_000.0)
    service = PoolService(PoolStore(tmp_path / "pool.db"), tmp_path / "cluster.yaml", clock=clock)
    try:
        # 8 a100 cards and 4 v100 devices (0.6 each): 10 cards fit only on both types
        job = service.submit(OPERATOR, {"project": "nlp", "cards": 10, "allow_mixing": True})
        assert job["state"] == "running"
        clock.now += 3600
        charges = PoolMetering(Meter(BOOK)).charges(service.store, clock.now)
        held = {c.device_type: c.devices for c in charges}
        assert held == {"a100": 8, "v100": 4}
        assert all(c.amount_micro > 0 for c in charges)
    finally:
        service.store.close()


def test_a_mixed_jobs_charge_and_its_runs_summary_split_the_cost_per_type(tmp_path: Path) -> None:
    """What a mixed job costs is told per device type (each at its own price), in the pool's
    charge and in its run's summary, beside the tokens per unit of cost."""
    from xirang_service.cost.run_cost import charge_summary

    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    clock = Clock(1_700_000_000.0)
    costs = CostStore(tmp_path / "cost.db")
    budgets = PoolBudgets(Governor(costs), Meter(BOOK))
    service = PoolService(
        PoolStore(tmp_path / "pool.db"), tmp_path / "cluster.yaml", clock=clock, budgets=budgets
    )
    try:
        job = service.submit(OPERATOR, {"project": "nlp", "cards": 10, "allow_mixing": True})
        clock.now += 3600
        charge = service.job_charge(OPERATOR, job["id"])
        assert charge is not None and set(charge["by_type"]) == {"a100", "v100"}
        parts = charge["by_type"].values()
        assert sum(p["amount"] for p in parts) == pytest.approx(charge["amount"], abs=1e-6)
        assert charge["by_type"]["a100"]["device_s"] == 8 * 3600
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "summary.json").write_text('{"tokens": 1000000}')
        charge_summary(run_dir, charge)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["cost"]["by_type"] == charge["by_type"]
        assert summary["tokens_per_cost"] == round(1_000_000 / charge["amount"], 1)
    finally:
        service.store.close()
        costs.close()
