"""Uneven pipeline stages (``parallel.stage_layers``): a split the planner gives for stages on
devices of unequal speed or memory trains exactly like the balanced one, and a split that
cannot cut the model is one error when the config is composed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.parallel.conftest import TINY
from xirang.planning.smoke import Measurement, run_plans
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ParallelPlan

#: four layers, so two stages can hold 2+2, 1+3 or 3+1
FOUR_LAYERS = [*TINY, "model.n_layer=4"]
STEPS = 4


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, ...], Measurement]:
    config = compose(FOUR_LAYERS)
    splits = [(), (1, 3), (3, 1)]
    plans = [ParallelPlan(pp=2, micro_batch=2, stage_layers=s) for s in splits]
    return dict(zip(splits, run_plans(config, plans, STEPS), strict=True))


@pytest.mark.parametrize("split", [(1, 3), (3, 1)])
def test_an_uneven_split_trains_as_the_even_one(
    runs: dict[tuple[int, ...], Measurement], split: tuple[int, ...]
) -> None:
    even, uneven = runs[()].losses, runs[split].losses
    assert len(even) == STEPS and even[-1] < even[0]  # it trains: the comparison means something
    assert max(abs(a - b) for a, b in zip(uneven, even, strict=True)) <= 1e-6
    # the split was taken: one stage holds 3 of the 4 layers, more than either even stage
    assert runs[split].state_bytes > runs[()].state_bytes * 1.2


def pp_config(*extra: str) -> dict[str, Any]:
    pipeline = ["parallel=pp", "trainer.nproc=2", "trainer.micro_batch=2"]
    return compose([*FOUR_LAYERS, *pipeline, *extra])


def test_a_valid_split_is_taken_as_given() -> None:
    config = pp_config("parallel.stage_layers=[1,3]")
    assert config["parallel"]["stage_layers"] == [1, 3]


@pytest.mark.parametrize(
    "split",
    ["[1,2]", "[0,4]", "[1,1,2]", "[4]"],
    ids=["sum below the layers", "an empty stage", "more stages than pp", "fewer stages"],
)
def test_a_split_that_does_not_cut_the_model_is_refused_at_compose(split: str) -> None:
    with pytest.raises(ConfigError) as caught:
        pp_config(f"parallel.stage_layers={split}")
    assert "give 2 whole numbers" in str(caught.value)
    assert "summing to the model's 4 layers" in str(caught.value)


def test_a_split_without_a_pipeline_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs a pipeline"):
        compose([*FOUR_LAYERS, "parallel=hybrid", "trainer.nproc=2", "parallel.stage_layers=[2,2]"])


def test_the_command_line_says_it_in_one_error_line() -> None:
    command = [
        sys.executable, "-m", "xirang", *FOUR_LAYERS, "parallel=pp", "trainer.nproc=2",
        "trainer.micro_batch=2", "parallel.stage_layers=[1,2]",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert "parallel.stage_layers=[1, 2]" in error and "summing to the model's 4 layers" in error
