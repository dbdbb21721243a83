"""The run observer: local runs are metered once; pool-run jobs are left to the pool's meter."""

from types import SimpleNamespace

from xirang_pricebook.observer import record_run

from xirang_service.cost.store import CostStore

SUMMARY = {
    "run_dir": "/runs/x",
    "project": "obs",
    "wall_time_s": 60.0,
    "cost": {"amount": 0.5, "currency": "USD"},
    "tokens": 1000,
}


def ctx(scheduler: str) -> SimpleNamespace:
    config = {"scheduler": {"name": scheduler}, "runtime": {"device_type": "cpu", "devices": 1}}
    return SimpleNamespace(config=config)


def test_a_local_run_is_charged_once_even_if_reported_twice():
    record_run(ctx("local"), SUMMARY)
    record_run(ctx("local"), SUMMARY)
    store = CostStore()
    [charge] = store.charges(project="obs")
    store.close()
    assert charge.amount_micro == 500_000 and charge.source == "run"


def test_a_run_inside_a_pool_job_is_left_to_the_pool_meter():
    record_run(ctx("pool"), {**SUMMARY, "run_dir": "/runs/pooled", "project": "pooled"})
    store = CostStore()
    assert store.charges(project="pooled") == []
    store.close()
