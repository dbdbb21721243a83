"""The figure a run returns to Hydra's sweeper: ``sweep.objective`` of its summary.

A sweeper that optimises (``hydra/sweeper=optuna``) needs the task to return a number; the
summary is a dictionary, so the run returns the one figure ``sweep.objective`` names, checked
against the summary's figures before anything starts. The whole summary stays in the run's
``summary.json``, where the sweep table reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xirang_core.errors import ConfigError

#: summary figures a sweep may optimise, each with the metrics record key that carries its
#: value at an evaluation step (what a pruner compares), or None when only the end has it
OBJECTIVES: dict[str, str | None] = {
    "val_loss": "val_loss",
    "final_loss": "loss",
    "tokens_per_s": "tokens_per_s",
    "mfu": "mfu",
    "val_bpb": None,
    "loss_drop_pct": None,
    "wall_time_s": None,
    "tokens_per_cost": None,
    "loss_drop_per_cost": None,
}
DIRECTIONS = ("minimize", "maximize")


@dataclass
class SweepConfig:
    objective: str = "val_loss"
    direction: str = "minimize"
    trial: int | None = None
    #: where a pruned trial's study is, for its workers (``join_trial`` records it)
    study: dict[str, Any] | None = None


def check_sweep(sweep: dict[str, Any]) -> None:
    """An objective the summary has and a direction Optuna knows, before any worker starts."""
    if sweep["objective"] not in OBJECTIVES:
        raise ConfigError(
            f"sweep.objective={sweep['objective']!r}: the run's summary has no such figure. "
            f"Valid objectives: {', '.join(OBJECTIVES)}"
        )
    if sweep["direction"] not in DIRECTIONS:
        raise ConfigError(
            f"sweep.direction={sweep['direction']!r}: not one of {', '.join(DIRECTIONS)}"
        )


def check_trial(config: dict[str, Any], sweeper: Mapping[str, Any]) -> None:
    """A pruned trial (``sweep.trial`` set by ``hydra/sweeper=optuna_pruning``) reports its
    objective at every evaluation: the objective must have a value there, and there must be
    evaluations. ``sweeper`` is the sweep's Hydra sweeper settings, which name the study."""
    sweep, every = config["sweep"], config["trainer"]["eval_every"]
    if not sweeper.get("pruner"):
        raise ConfigError(
            f"sweep.trial={sweep['trial']}: set only by hydra/sweeper=optuna_pruning for the "
            f"trial a job runs; this run has no such sweeper, so leave sweep.trial unset"
        )
    prunable = [k for k, v in OBJECTIVES.items() if v]
    if OBJECTIVES[sweep["objective"]] is None:
        raise ConfigError(
            f"sweep.objective={sweep['objective']}: known only at the end of a run, so a pruner "
            f"cannot compare trials on it; prune on one of {', '.join(prunable)}, or use "
            f"hydra/sweeper=optuna (no pruning)"
        )
    if every < 1:
        raise ConfigError(
            "hydra/sweeper=optuna_pruning compares trials at their evaluations: set "
            "trainer.eval_every to a step interval (trainer.eval_every=0 evaluates at the end only)"
        )


def objective_value(summary: Mapping[str, Any], sweep: Mapping[str, Any]) -> float:
    """The summary's ``sweep.objective`` as a float (NaN when the run could not measure it,
    e.g. tokens per cost under a free price book: the sweeper then counts the trial failed)."""
    value = summary.get(sweep["objective"])
    return float(value) if value is not None else math.nan


def intermediate(metrics: Mapping[str, Any], objective: str) -> float | None:
    """The objective's value in an evaluation step's metrics record, if it carries one."""
    key = OBJECTIVES.get(objective)
    value = metrics.get(key) if key else None
    return float(value) if value is not None else None
