"""Hydra's sweep syntax becomes the Optuna distributions a user means by it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from xirang_optuna.search_space import search_space
from xirang_optuna.sweeper import grid_choices

from xirang import ConfigError


def test_each_sweep_form_is_a_distribution_and_plain_overrides_stay() -> None:
    space, fixed = search_space(
        [
            "optim.lr=tag(log, interval(1e-4, 1e-1))",
            "optim.weight_decay=interval(0, 0.2)",
            "model.n_layers=tag(int, interval(2, 8))",
            "trainer.global_batch=range(8, 33, 8)",
            "optim.name=choice(adamw,sgd)",
            "data.seq_len=64,128",
            "trainer.max_steps=30",
        ]
    )
    assert space == {
        "optim.lr": FloatDistribution(1e-4, 1e-1, log=True),
        "optim.weight_decay": FloatDistribution(0.0, 0.2),
        "model.n_layers": IntDistribution(2, 8),
        "trainer.global_batch": IntDistribution(8, 32, step=8),
        "optim.name": CategoricalDistribution(["adamw", "sgd"]),
        "data.seq_len": CategoricalDistribution([64, 128]),
    }
    assert fixed == ["trainer.max_steps=30"]


@given(st.integers(-50, 50), st.integers(1, 60), st.integers(1, 9))
def test_a_range_gives_what_pythons_range_gives(start: int, span: int, step: int) -> None:
    space, _ = search_space([f"x=range({start}, {start + span}, {step})"])
    assert grid_choices(space)["x"] == list(range(start, start + span, step))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("x=tag(log, interval(0, 1))", "above 0 on a log scale"),
        ("x=interval(3, 1)", "start < end"),
        ("x=range(5, 5)", "gives no value"),
    ],
)
def test_a_space_that_cannot_be_sampled_is_named(override: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        search_space([override])


def test_the_grid_sampler_refuses_a_continuous_interval() -> None:
    space, _ = search_space(["x=interval(0, 1)"])
    with pytest.raises(ConfigError, match="choice"):
        grid_choices(space)
