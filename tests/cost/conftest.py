"""Charges for cost tests, built the way the meter builds them."""

from __future__ import annotations

from hypothesis import strategies as st

from xirang_service.cost.charges import Charge

TEAMS = ("research", "product", "infra")
PROJECTS = ("nlp", "vision", "speech", "ranking")
TYPES = ("a100", "h100", "v100", "cpu")


@st.composite
def charges(draw: st.DrawFn) -> Charge:
    """Any plausible charge: idle part never above the amount, like the meter's."""
    amount = draw(st.integers(0, 10**12))
    held = draw(st.floats(0, 1e7, allow_nan=False))
    return Charge(
        source=draw(st.sampled_from(("pool", "run"))),
        ref=str(draw(st.integers(0, 10**9))),
        project=draw(st.sampled_from(PROJECTS)),
        team=draw(st.sampled_from(TEAMS)),
        device_type=draw(st.sampled_from(TYPES)),
        devices=draw(st.integers(1, 512)),
        start=draw(st.floats(0, 2e9, allow_nan=False)),
        held_s=held,
        busy_s=held,
        amount_micro=amount,
        idle_micro=draw(st.integers(0, amount)),
    )


def charge(project: str = "nlp", team: str = "research", **extra) -> Charge:
    """A simple charge for example-based tests."""
    values = dict(
        source="pool",
        ref="1@0.000",
        project=project,
        team=team,
        device_type="a100",
        devices=8,
        start=0.0,
        held_s=3600.0,
        busy_s=3600.0,
        amount_micro=10_000_000,
    )
    values.update(extra)
    return Charge(**values)
