"""Interval parsing and the Young/Daly policy."""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_dirs
from xirang_core.checkpoint.interval import (
    AUTO_PROBE_STEPS,
    Interval,
    IntervalPolicy,
    daly_interval,
    expected_waste,
)
from xirang_core.config import compose
from xirang_core.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "kind", "every"),
    [
        (0, "end", 0),
        ("100", "steps", 100),
        (50, "steps", 50),
        ("20steps", "steps", 20),
        ("7.5min", "minutes", 7.5),
        ("auto", "auto", 0),
    ],
)
def test_interval_forms(text: object, kind: str, every: float) -> None:
    assert Interval.parse(text) == Interval(kind, every)


@pytest.mark.parametrize("text", ["soon", "-3", "2.5", "10h"])
def test_bad_interval_names_the_valid_forms(text: str) -> None:
    with pytest.raises(ConfigError, match=r"checkpoint\.interval"):
        Interval.parse(text)


def test_a_bad_interval_stops_the_run_before_any_process_starts(
    run_xirang: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    result = run_xirang("checkpoint.interval=bogus", timeout=300)
    assert result.returncode != 0
    text = " ".join(result.stderr.split())
    assert "checkpoint.interval='bogus': use N or '<N>steps' (every N steps)" in text
    assert "'<M>m' or '<M>min' (every M minutes), 'auto'" in text
    assert "Traceback" not in result.stderr
    assert run_dirs(tmp_path) == []  # no config written: no worker ever started


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("checkpoint.interval=2.5", "checkpoint.interval='2.5': steps must be a whole number"),
        ("checkpoint.interval=10h", "checkpoint.interval='10h': use N"),
        ("checkpoint.mtbf_hours=0", "checkpoint.mtbf_hours=0.0: the mean time between failures"),
    ],
)
def test_bad_checkpoint_settings_fail_when_the_config_is_composed(
    override: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        compose([override])


@pytest.mark.parametrize("value", ["5m", "7.5min", "40", "20steps", "auto", "0"])
def test_every_valid_interval_form_composes(value: str) -> None:
    assert compose([f"checkpoint.interval={value}"])["checkpoint"]["interval"] == value


def test_llama3_example_gives_about_six_minutes() -> None:
    # REFERENCE: M ~ 3.1 h, C = 6.3 s -> T ~ 6 min
    assert 5 * 60 < daly_interval(6.3, 3.1 * 3600) < 7 * 60


@given(cost=st.floats(0.01, 600), factor=st.floats(100, 1e5))
def test_daly_interval_is_near_the_waste_minimum(cost: float, factor: float) -> None:
    """In the regime the first-order formulas are for (saves far shorter than the MTBF)."""
    mtbf = cost * factor
    t = daly_interval(cost, mtbf)
    assert t > 0
    best = expected_waste(cost, t, mtbf)
    assert best <= expected_waste(cost, t / 2, mtbf) + 1e-9
    assert best <= expected_waste(cost, t * 2, mtbf) + 1e-9
    assert t <= math.sqrt(2 * cost * mtbf) * 1.2


def test_policy_counts_steps_from_the_resumed_step() -> None:
    policy = IntervalPolicy(Interval("steps", 5), 24, start_step=11)
    assert [s for s in range(11, 26) if policy.due(s) and policy.saved(s, 0.0) is None] == [
        15,
        20,
        25,
    ]


def test_auto_probes_then_derives_an_interval_from_the_save_cost() -> None:
    policy = IntervalPolicy(Interval("auto"), mtbf_hours=1.0, start_step=1)
    assert not policy.due(AUTO_PROBE_STEPS - 1) and policy.due(AUTO_PROBE_STEPS)
    policy.saved(AUTO_PROBE_STEPS, save_cost_s=0.5)
    assert policy.every_steps >= 1
    assert policy.every_steps != AUTO_PROBE_STEPS or policy.every_steps == 1
