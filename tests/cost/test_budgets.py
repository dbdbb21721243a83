"""Budgets: warning at a threshold, the policy's action at the limit."""

from types import SimpleNamespace

import pytest

from tests.cost.conftest import charge
from xirang_service.cost.budgets import LOWEST_PRIORITY, Budget
from xirang_service.cost.errors import BudgetExceeded, CostError
from xirang_service.cost.governor import Governor
from xirang_service.cost.store import CostStore


@pytest.fixture
def store(tmp_path):
    s = CostStore(tmp_path / "cost.db")
    yield s
    s.close()


def spend(store, project, micro, ref="r1"):
    store.record([charge(project, ref=ref, amount_micro=micro)])


def test_states_move_from_ok_to_warn_to_limit(store):
    store.set_budget(Budget("project", "nlp", 100_000_000, warn_at=0.8))
    governor = Governor(store)
    spend(store, "nlp", 50_000_000)
    assert governor.status("project", "nlp").state == "ok"
    spend(store, "nlp", 85_000_000)  # same ref: replaced, not added
    assert governor.status("project", "nlp").state == "warn"
    spend(store, "nlp", 20_000_000, ref="r2")
    status = governor.status("project", "nlp")
    assert (status.state, status.action) == ("limit", "stop_submissions")


def test_stop_submissions_refuses_new_jobs_with_the_way_out(store):
    store.set_budget(Budget("project", "nlp", 1_000_000))
    spend(store, "nlp", 1_000_000)
    with pytest.raises(BudgetExceeded, match="xirang cost budget set project nlp"):
        Governor(store).admit("nlp", priority=2)
    assert Governor(store).admit("vision", priority=2) == 2  # no budget: unchanged


def test_lower_priority_demotes_and_checkpoint_stop_stops_running_jobs(store):
    store.set_budget(Budget("project", "nlp", 1_000_000, action="lower_priority"))
    store.set_budget(Budget("job", "job-7", 500_000, action="checkpoint_stop"))
    spend(store, "nlp", 2_000_000)
    governor = Governor(store)
    assert governor.admit("nlp", priority=3) == LOWEST_PRIORITY
    assert not governor.should_stop("vision", "job-8")
    store.record([charge("vision", ref="job-7", amount_micro=600_000)])
    assert governor.should_stop("vision", "job-7")


def test_a_pool_job_budget_counts_all_its_allocations(store):
    store.set_budget(Budget("job", "42", 3_000_000, action="checkpoint_stop"))
    store.record([charge("nlp", ref="42@100.000", amount_micro=2_000_000)])
    running = [SimpleNamespace(id=42, project="nlp"), SimpleNamespace(id=43, project="nlp")]
    assert Governor(store).jobs_to_stop(running) == []
    store.record([charge("nlp", ref="42@900.000", amount_micro=1_000_000)])  # requeued, ran again
    assert [j.id for j in Governor(store).jobs_to_stop(running)] == [42]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"scope": "team"}, "scope 'team'"),
        ({"action": "email"}, "stop_submissions"),
        ({"limit_micro": 0}, "limit must be > 0"),
        ({"warn_at": 1.5}, "fraction"),
    ],
)
def test_bad_budgets_are_refused(kwargs, words):
    values = {"scope": "project", "name": "nlp", "limit_micro": 10, **kwargs}
    with pytest.raises(CostError, match=words):
        Budget(**values)
