"""The native strategies are registered presets of one mesh strategy; bad plans are refused."""

from __future__ import annotations

import pytest

from xirang_core.parallel.plan import PlanError
from xirang_core.plugins import get_registry

PRESETS = {"fsdp": (2, 1, 1), "tp": (1, 2, 1), "sp": (1, 2, 1), "pp": (1, 1, 2)}


@pytest.mark.parametrize(("name", "degrees"), PRESETS.items())
def test_presets_resolve_to_their_split(tiny_strategy_config, name: str, degrees: tuple) -> None:
    strategy = get_registry().create("parallel", tiny_strategy_config(name))
    plan = strategy.plan(world=2, micro_batch=2)
    assert (plan.dp, plan.tp, plan.pp) == degrees
    assert plan.sp == (name == "sp")


def test_hybrid_takes_the_rest_as_data_parallel(tiny_strategy_config) -> None:
    settings = {**tiny_strategy_config("hybrid"), "tp": 2, "pp": 2}
    plan = get_registry().create("parallel", settings).plan(world=8, micro_batch=1)
    assert (plan.dp, plan.tp, plan.pp) == (2, 2, 2)


def test_world_that_does_not_split_names_valid_splits(tiny_strategy_config) -> None:
    settings = {**tiny_strategy_config("hybrid"), "tp": 3}
    with pytest.raises(PlanError, match=r"world size 4 .*Valid splits of 4: dp=1 tp=1 pp=4"):
        get_registry().create("parallel", settings).plan(world=4, micro_batch=1)


@pytest.fixture
def tiny_strategy_config():
    from pathlib import Path

    import yaml
    from xirang_torch import __file__ as package

    def load(name: str) -> dict:
        return yaml.safe_load(
            (Path(package).parent / "conf" / "parallel" / f"{name}.yaml").read_text()
        )

    return load
