"""The step simulation behind the host time model: the dedicated-device pipeline formula where
nothing is shared, and the work and critical-path bounds where cores are."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_planner.simulate import StageWork, schedule_actions, simulate_step


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_dedicated_devices_give_the_classic_bubble(schedule: str) -> None:
    """One core per worker, no message time: (m + p - 1) slots of forward + backward."""
    p, m = 4, 8
    work = [StageWork(1.0, 2.0)] * p
    assert simulate_step(work, schedule, m, 0.0, slots=p, replicas=1) == pytest.approx(
        (m + p - 1) * 3.0
    )


def test_one_f_one_b_order_matches_torch() -> None:
    """Stage s runs p - s forwards first, then a backward and a forward in turn."""
    assert schedule_actions("1f1b", 2, 4, 4) == [
        ("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)
    ]  # fmt: skip


def test_shared_cores_hide_the_bubble() -> None:
    """Four stages on one core: the core never idles, so the step is the total work."""
    work = [StageWork(1.0, 2.0)] * 4
    assert simulate_step(work, "1f1b", 8, 0.0, slots=1, replicas=1) == pytest.approx(4 * 8 * 3.0)


@settings(max_examples=40, deadline=None)
@given(
    stages=st.integers(1, 4),
    micro=st.integers(1, 6),
    slots=st.floats(0.5, 4.0),
    replicas=st.integers(1, 3),
    hop=st.floats(0.0, 0.5),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
)
def test_step_respects_work_and_path_bounds(
    stages: int, micro: int, slots: float, replicas: int, hop: float, schedule: str
) -> None:
    work = [StageWork(1.0 + s / 10, 2.0, 0.1, 0.2) for s in range(stages)]
    if schedule == "1f1b" and micro < stages:
        micro = stages
    step = simulate_step(work, schedule, micro, hop, slots, replicas)
    total = sum(w.forward + w.backward for w in work) * micro * replicas
    path = sum(w.forward + w.backward for w in work) + 2 * (stages - 1) * hop
    assert step >= total / slots - 1e-9  # cores cannot do more than they have
    assert step >= path - 1e-9  # one micro-batch's way through and back
