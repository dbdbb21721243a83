"""``parallel=auto`` asks a planner plugin: the built-in one unless ``parallel.planner`` names
another, which a third-party distribution registers exactly as the built-in does."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

import pytest

from xirang import hookimpl
from xirang.planning import (
    ClusterShape,
    ModelShape,
    ParallelPlan,
    PlanChoice,
    Planner,
    candidate_plans,
)
from xirang.specs import PlannerSpec
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.parallel.resolve import resolve_parallel
from xirang_core.plugins import build_registry

TINY = [
    "model=gpt_tiny",
    "tokenizer=bytes",
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "data.seq_len=16",
    "trainer.global_batch=8",
    "trainer.nproc=2",
]


@dataclass(frozen=True)
class Dist:
    name: str = "xirang-pipeline-first"
    version: str = "0.1.0"


@dataclass(frozen=True)
class EntryPoint:
    """The entry point a third-party distribution declares for its planner module."""

    name: str
    value: str
    dist: Dist = field(default_factory=Dist)
    group: str = "xirang"

    def load(self) -> object:
        return sys.modules[self.value]


class PipelineFirst:
    """A planner that prefers the most pipeline stages, then the largest micro-batch: not the
    built-in's choice, so the run shows whose choice it trained."""

    seen: ClassVar[list[tuple[ModelShape, ClusterShape]]] = []

    def choose(
        self, config: dict[str, Any], shape: ModelShape, cluster: ClusterShape
    ) -> PlanChoice:
        PipelineFirst.seen.append((shape, cluster))
        plans = candidate_plans(
            config["trainer"]["nproc"], shape, config["trainer"]["global_batch"]
        )
        ranking = tuple(sorted(plans, key=lambda p: (-p.pp, -p.micro_batch, p.label())))
        return PlanChoice(ranking[0], ranking)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The installed plugins plus a pluggy plugin (a module with a ``xirang_planners`` hook)
    that another distribution declares."""
    module = types.ModuleType("xirang_pipeline_first")
    module.PipelineFirst = PipelineFirst  # type: ignore[attr-defined]

    @hookimpl
    def xirang_planners() -> list[PlannerSpec]:
        target = "xirang_pipeline_first:PipelineFirst"
        return [PlannerSpec(name="pipeline_first", target=target)]

    module.xirang_planners = xirang_planners  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(PipelineFirst, "seen", [])
    point = EntryPoint("pipeline_first", module.__name__)
    return build_registry([*metadata.entry_points(group="xirang"), point])


def test_parallel_auto_takes_the_plan_of_the_planner_the_config_names(registry) -> None:
    config = compose([*TINY, "parallel=auto", "parallel.planner=pipeline_first"], registry)
    config = resolve_parallel(config, registry)
    [(shape, cluster)] = PipelineFirst.seen
    assert (shape.layers, shape.hidden, shape.seq_len) == (2, 32, 16)
    assert cluster.devices == 2  # this host, for the run's two workers
    chosen = ParallelPlan(pp=2, micro_batch=8, schedule="gpipe")  # the built-in would not
    assert config["parallel"] == chosen.settings()
    assert (config["trainer"]["micro_batch"], config["trainer"]["grad_accum"]) == (8, 1)


def test_parallel_auto_names_the_built_in_planner_by_default(registry) -> None:
    from xirang_planner.planner import DefaultPlanner

    config = compose([*TINY, "parallel=auto"], registry)
    assert config["parallel"]["planner"] == "default"
    assert registry.load("planner", "default") is DefaultPlanner
    assert isinstance(DefaultPlanner(), Planner)


def test_an_unknown_planner_is_refused_naming_the_installed_ones(registry) -> None:
    with pytest.raises(ConfigError) as error:
        compose([*TINY, "parallel=auto", "parallel.planner=ilp"], registry)
    assert "parallel.planner=ilp: no such planner" in str(error.value)
    assert "Valid: default, pipeline_first" in str(error.value)


def test_a_bad_smoke_setting_is_refused_before_launch(registry) -> None:
    with pytest.raises(ConfigError, match=r"parallel\.smoke_top=0, .*must be at least 1"):
        compose([*TINY, "parallel=auto", "parallel.smoke_top=0"], registry)
    with pytest.raises(ConfigError, match=r"^parallel\.smoke_top: .*'many'"):
        compose([*TINY, "parallel=auto", "parallel.smoke_top=many"], registry)


class Timings:
    """A measuring plugin of another distribution: seconds per step it read for each plan
    (here the planner's last candidate is the fastest), and the plans it was asked about."""

    asked: ClassVar[list[list[ParallelPlan]]] = []

    @staticmethod
    @hookimpl
    def xirang_measure_plans(plans: list[ParallelPlan], steps: int) -> list[float]:
        Timings.asked.append(list(plans))
        return [float(len(plans) - i) for i in range(len(plans))]


def _without_built_in_planner(extra: list[Any]) -> Any:
    points = [p for p in metadata.entry_points(group="xirang") if p.name != "planner"]
    return build_registry([*points, *extra])


def test_smoke_takes_the_fastest_of_the_planners_top_plans_as_measured(
    registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``parallel.smoke=true`` hands the planner's top ``smoke_top`` plans to the plugin that
    measures (``xirang_measure_plans``) and trains the fastest, not the planner's first."""
    module = types.ModuleType("xirang_timings")
    module.xirang_measure_plans = Timings.xirang_measure_plans  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(Timings, "asked", [])
    planner = EntryPoint("pipeline_first", "xirang_pipeline_first")  # the fixture's module
    timings = _without_built_in_planner([planner, EntryPoint("timings", module.__name__)])
    overrides = ["parallel.planner=pipeline_first", "parallel.smoke=true", "parallel.smoke_top=3"]
    config = compose([*TINY, "parallel=auto", *overrides], timings)
    config = resolve_parallel(config, timings)
    [asked] = Timings.asked
    assert len(asked) == 3 and asked[0].pp == 2  # the planner's ranking, pipelines first
    assert config["parallel"] == asked[-1].settings() != asked[0].settings()


def test_smoke_without_a_plugin_that_measures_is_refused_at_compose(registry: Any) -> None:
    planner = EntryPoint("pipeline_first", "xirang_pipeline_first")  # the fixture's module
    bare = _without_built_in_planner([planner])
    with pytest.raises(ConfigError, match=r"parallel\.smoke=true: no installed plugin measures"):
        compose(
            [*TINY, "parallel=auto", "parallel.planner=pipeline_first", "parallel.smoke=true"], bare
        )
