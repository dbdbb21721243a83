"""Metering pool jobs (from the pool's own store) and training runs."""

from tests.cost.pools import make_pool
from xirang_service.console.state import read_state
from xirang_service.cost.meter import Meter, idle_part, run_charge
from xirang_service.cost.pricebook import PriceBook
from xirang_service.pool.service import OPERATOR
from xirang_service.pool.store import PoolStore

HOUR = 3600
BOOK = PriceBook({"a100": 3.0, "v100": 1.0})


def test_running_and_finished_jobs_are_charged_to_project_and_team(tmp_path):
    pool = make_pool(tmp_path)
    pool.clock.now += HOUR
    pool.service.complete(OPERATOR, 1, ok=True)  # job 1 ends after one hour
    pool.clock.now += HOUR
    state = read_state(PoolStore(pool.state), pool.clock.now, usage=True)
    charges = {c.ref.split("@")[0]: c for c in Meter(BOOK).pool_charges(state, pool.clock.now)}
    assert charges["1"].held_s == HOUR and charges["1"].capacity_class == "guaranteed"
    assert charges["1"].amount_micro == 16_800_000  # 8 a100 x 3.00 x 0.7 (guaranteed) x 1 h
    assert (charges["1"].project, charges["1"].team) == ("nlp", "research")
    borrowed = [c for c in charges.values() if c.capacity_class == "spot"]
    assert borrowed, "the job beyond nlp's guarantee is borrowed capacity, priced as spot"
    assert all(c.held_s == 2 * HOUR for k, c in charges.items() if k != "1")


def test_idle_time_inside_an_allocation_is_charged_and_shown(tmp_path):
    pool = make_pool(tmp_path)
    job = pool.service.engine.job(1)
    job.payload.update(utilisation=0.25, run_ended_at=pool.clock.now + HOUR)
    pool.clock.now += 2 * HOUR  # held one hour after its run ended
    pool.service.complete(OPERATOR, 1, ok=True)
    state = read_state(PoolStore(pool.state), pool.clock.now, usage=True)
    [charge] = [c for c in Meter(BOOK).pool_charges(state, pool.clock.now) if c.ref[0] == "1"]
    assert charge.idle_after_s == HOUR
    assert charge.busy_s == HOUR * 0.25  # a quarter of the hour the run ran
    assert 0 < charge.idle_micro < charge.amount_micro
    assert charge.idle_micro == idle_part(charge.amount_micro, charge.busy_s, charge.held_s)


def test_idle_part_and_busy_part_add_up():
    assert idle_part(1_000_001, 1.0, 3.0) == 666_667
    assert idle_part(1_000_000, 0.0, 3.0) == 1_000_000
    assert idle_part(1_000_000, 3.0, 3.0) == 0


def test_a_run_is_charged_what_its_policy_quoted():
    summary = {
        "run_dir": "/runs/a",
        "project": "nlp",
        "wall_time_s": 120.0,
        "tokens": 50_000,
        "first_loss": 4.0,
        "final_loss": 1.5,
        "cost": {"amount": 0.25, "currency": "USD"},
    }
    config = {"team": "research", "runtime": {"device_type": "cpu", "devices": 2}}
    charge = run_charge(summary, config, end=1000.0)
    assert (charge.amount_micro, charge.devices, charge.start) == (250_000, 2, 880.0)
    assert (charge.project, charge.team, charge.loss_drop) == ("nlp", "research", 2.5)
