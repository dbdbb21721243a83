"""Pool policy ``gavel``: Gavel's heterogeneity-aware max-min fairness, loaded through the
``xirang`` entry point group as the built-in policies are."""

from __future__ import annotations

from xirang_service.pool import clusterfile
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.policy import load_policy, policy_names

#: two types of four devices; class ``x`` runs as fast on both, ``y`` at half speed on ``b``
#: (two of its devices make a card): ``y`` has the comparative advantage on ``a``
TWO_TYPES = {
    "groups": [
        {"type": "a", "nodes": 1, "devices": 4},
        {"type": "b", "nodes": 1, "devices": 4},
    ],
    "projects": [{"name": "p", "guaranteed": 8}],
    "throughputs": {
        "reference": "a",
        "max_inflation": 2,
        "classes": {"x": {"a": 1.0, "b": 1.0}, "y": {"a": 1.0, "b": 0.5}},
    },
}


def _engine(policy: str) -> PoolEngine:
    cluster, throughputs, quotas = clusterfile.build(dict(TWO_TYPES))
    return PoolEngine(cluster, throughputs, load_policy(policy), quotas)


def _started(policy: str) -> dict[str, list[str]]:
    """Four 1-card jobs of ``x`` then four of ``y``, one pass: the types each class got."""
    engine = _engine(policy)
    for job_class in ("x",) * 4 + ("y",) * 4:
        engine.submit("p", 1, 0.0, job_class)
    engine.schedule(0.0)
    placed: dict[str, list[str]] = {"x": [], "y": []}
    for job in engine.running_jobs():
        placed[job.job_class].append(job.device_type)
    return placed


def test_gavel_is_a_registered_pool_policy() -> None:
    assert "gavel" in policy_names()


def test_gavel_places_each_class_where_its_comparative_advantage_is() -> None:
    """The max-min allocation gives ``y`` the type it is fast on and ``x`` the other, so all
    eight jobs run; the default policy puts ``x`` on the fastest type first and two ``y``
    jobs, needing two ``b`` devices each, wait."""
    assert _started("gavel") == {"x": ["b"] * 4, "y": ["a"] * 4}
    default = _started("priority")
    assert default["x"] == ["a"] * 4 and default["y"] == ["b"] * 2


def test_a_less_served_job_preempts_after_a_round() -> None:
    """Least attained service across the pool: a new job takes the devices of one that has
    run past the first level (1 card-hour) once that job has had its round (6 minutes)."""
    engine = _engine("gavel")
    hog = engine.submit("p", 4, 0.0, "x")
    engine.schedule(0.0)
    filler = engine.submit("p", 4, 0.0, "x")
    engine.schedule(0.0)
    assert engine.jobs[hog.id].state.value == "running" == engine.jobs[filler.id].state.value
    late = engine.submit("p", 4, 7200.0, "y")
    events = engine.schedule(7200.0)
    assert [e.kind for e in events if e.job != late.id] == ["preempted"]
    assert engine.jobs[late.id].state.value == "running"
