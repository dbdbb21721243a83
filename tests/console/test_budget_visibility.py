"""Which budgets a project's viewer sees: its project's, and those of jobs it was charged for;
never another project's job budget that happens to share its name (a project named ``2``)."""

from __future__ import annotations

from xirang_service.cost.budgets import Budget


def test_a_project_named_like_a_job_id_does_not_see_that_jobs_budget(console) -> None:
    costs = console.source.costs
    costs.set_budget(Budget("job", "2", 10_000_000))  # job 2 is one of nlp's
    costs.set_budget(Budget("project", "2", 10_000_000))

    def seen(who: str) -> set[tuple[str, str]]:
        return {(b["scope"], b["name"]) for b in console.source.budgets_for(who)}

    assert seen("2") == {("project", "2")}
    assert ("job", "2") in seen("nlp") and ("project", "nlp") in seen("nlp")
    assert not {b for b in seen("vision") if b[1] in ("2", "nlp")}
