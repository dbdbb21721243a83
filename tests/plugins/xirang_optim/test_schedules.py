"""The built-in learning-rate schedules (``schedule=cosine|linear|constant|wsd``): the rate at
the steps that define each, and bad settings refused at compose with one line."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

OPTIM = ["optim.lr=1.0", "optim.min_lr=0.1", "optim.warmup_steps=10"]


def rates(schedule: list[str], steps: tuple[int, ...], max_steps: int = 110) -> list[float]:
    """The composed schedule's rate at each of ``steps``, rounded for comparison."""
    config = compose([*schedule, *OPTIM])
    built = get_registry().create("schedule", config["schedule"])
    return [round(built.lr(step, max_steps, config["optim"]), 6) for step in steps]


def test_every_schedule_warms_up_linearly_from_zero() -> None:
    for name in ("cosine", "linear", "constant", "wsd"):
        assert rates([f"schedule={name}"], (1, 5, 10)) == [0.1, 0.5, 1.0], name


def test_linear_decays_in_a_straight_line_to_min_lr_at_the_last_step() -> None:
    # 100 steps after warm-up: a quarter, half and all of the way from 1.0 down to 0.1
    assert rates(["schedule=linear"], (35, 60, 110)) == [0.775, 0.55, 0.1]


def test_constant_holds_the_rate_to_the_end() -> None:
    assert rates(["schedule=constant"], (11, 60, 110)) == [1.0, 1.0, 1.0]


def test_wsd_is_stable_then_decays_over_its_fraction_of_the_steps() -> None:
    # decay_fraction 0.2 of 110 steps: stable through step 88, linear to 0.1 at step 110
    assert rates(["schedule=wsd"], (11, 88, 99, 110)) == [1.0, 1.0, 0.55, 0.1]
    # 0.5: stable through step 55, a fifth of the way down 11 steps later
    assert rates(["schedule=wsd", "schedule.decay_fraction=0.5"], (55, 66, 110)) == [1.0, 0.82, 0.1]
    # the whole run decays: the decay starts where the warm-up ends
    assert rates(["schedule=wsd", "schedule.decay_fraction=1"], (10, 60, 110)) == [1.0, 0.55, 0.1]


def test_cosine_is_unchanged() -> None:
    assert rates(["schedule=cosine"], (60, 110)) == [0.55, 0.1]


@pytest.mark.parametrize("fraction", ["0", "1.5", "-0.2"])
def test_a_decay_fraction_outside_0_1_is_refused_at_compose(fraction: str) -> None:
    with pytest.raises(ConfigError, match=r"schedule.decay_fraction=.*must be in \(0, 1\]"):
        compose(["schedule=wsd", f"schedule.decay_fraction={fraction}"])


def test_the_cli_refuses_a_bad_decay_fraction_with_one_line(run_xirang: Callable) -> None:
    result = run_xirang("schedule=wsd", "schedule.decay_fraction=2")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "xirang error: schedule.decay_fraction=2.0: must be in (0, 1], the share of "
        "trainer.max_steps the final decay takes (e.g. 0.2 for the last 20%)"
    ]


def test_an_unknown_schedule_names_the_built_ins() -> None:
    with pytest.raises(ConfigError, match=r"cosine.*constant|constant.*cosine"):
        compose(["schedule=step"])
