"""Optional protocol members: a plugin that inherits none of ``xirang.specs``' base classes
(written before a member existed) still loads and trains, its own members kept and the rest
defaulted; the kernel calls every member without probing for it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import torch

from xirang.specs import StrategyBase, WorkerContext

PLUGIN = '''
from xirang import conf_folder, hookimpl
from xirang.specs import StrategySpec


class PlainStrategy:
    """Only ``wrap``, as CONTRIBUTING.md asks: no base class, no optional member."""

    def wrap(self, model, ctx):
        return model


class CompilingStrategy:
    """One optional member of its own: it compiles (and here: does not) the model itself."""

    compiles = True

    def wrap(self, model, ctx):
        return model


@hookimpl
def xirang_parallel_strategies():
    return [
        StrategySpec(name="plain", target="xirang_plainstrat:PlainStrategy", multi_process=False),
        StrategySpec(
            name="selfcompiled",
            target="xirang_plainstrat:CompilingStrategy",
            multi_process=False,
        ),
    ]


@hookimpl
def xirang_config_search_paths():
    return conf_folder(__file__)
'''


def _use_plugin(xirang: Any, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "xirang_plainstrat.py").write_text(textwrap.dedent(PLUGIN))
    (source / "conf" / "parallel").mkdir(parents=True)
    (source / "conf" / "parallel" / "plain.yaml").write_text("name: plain\n")
    xirang.use("xirang_plainstrat", path=source)


def test_a_strategy_without_the_base_gets_the_defaults_and_keeps_its_own(xirang, tmp_path):
    _use_plugin(xirang, tmp_path)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), str(tmp_path))
    plain = xirang.registry.create("parallel", {"name": "plain"})
    assert not isinstance(plain, StrategyBase)  # nothing inherited: filled in
    assert (plain.compiles, plain.splits_model, plain.optimizer, plain.trained) == (
        False,
        False,
        None,
        None,
    )
    assert plain.build_mesh(ctx) is None
    assert plain.shards_parameters(ctx) is False
    assert xirang.registry.create("parallel", {"name": "selfcompiled"}).compiles is True


def test_a_strategy_without_the_base_trains(xirang, tmp_path):
    _use_plugin(xirang, tmp_path)
    run = xirang.train("parallel=plain", "model=gpt_tiny")
    assert run.summary["steps"] == 4
    assert run.summary["final_loss"] > 0
