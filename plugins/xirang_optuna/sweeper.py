"""``hydra/sweeper=optuna`` and ``optuna_pruning``: an Optuna search launched through Hydra.

Each round asks the study for ``n_jobs`` trials, turns their sampled values into overrides
(the search space is Hydra's own sweep syntax, :mod:`xirang_optuna.search_space`), launches
them with Hydra's launcher (local, joblib, Slurm) and tells the study how each ended. The
study is Optuna's own database storage: an SQLite file in the sweep folder unless
``storage`` names another (``postgresql://...``), so jobs in other processes and on other
nodes open it. With a pruner, each job also gets its trial's number as ``sweep.trial`` and
reports its objective at every evaluation; a job its pruner stops ends cleanly and marks its
trial, and the sweeper records that trial as pruned, so samplers and pruners treat it as such.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import TrialState

from xirang import ConfigError
from xirang_optuna.search_space import as_override, search_space
from xirang_optuna.trial import PRUNED_AT, check_storage, open_storage

log = logging.getLogger(__name__)


class OptunaSearch:
    """The search a sweep runs; :mod:`xirang_optuna.hydra_sweeper` is the Hydra plugin."""

    def __init__(
        self,
        sampler: Any,
        pruner: Any = None,
        direction: str = "minimize",
        storage: str | None = None,
        study_name: str = "xirang",
        n_trials: int = 20,
        n_jobs: int = 1,
        max_failure_rate: float = 0.0,
        params: dict[str, str] | None = None,
    ) -> None:
        self.sampler, self.pruner, self.direction = sampler, pruner, direction
        self.storage, self.study_name = storage, study_name
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.params = dict(params or {})
        self.job_idx = 0

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        """Ask a round of ``n_jobs`` trials, launch them, tell each one's end; ``n_trials``."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")  # as Hydra's own sweepers
        params = [f"{key}={value}" for key, value in self.params.items()]
        space, fixed = search_space([*params, *arguments])
        study = self._study(space)
        left = min(self.n_trials, grid_size(space) if self._grid() else self.n_trials)
        while left > 0:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, left))]
            returns = self.launcher.launch(
                [self._overrides(trial, fixed) for trial in trials], initial_job_idx=self.job_idx
            )
            self.job_idx += len(returns)
            failed = [r for t, r in zip(trials, returns, strict=True) if not _tell(study, t, r)]
            if len(failed) > self.max_failure_rate * len(returns):
                for ret in failed:
                    _ = ret.return_value  # raises the job's own error
                raise RuntimeError(f"{len(failed)} of {len(returns)} trials failed")
            left -= len(trials)
        self._save_results(study)

    def _grid(self) -> bool:
        return isinstance(self.sampler, functools.partial)  # sampler=grid wants the space first

    def _study(self, space: dict[str, BaseDistribution]) -> optuna.Study:
        if self.direction not in ("minimize", "maximize"):
            raise ConfigError(
                f"hydra.sweeper.direction={self.direction}: one of minimize, maximize"
            )
        check_storage(self.storage)
        sampler = self.sampler(grid_choices(space)) if self._grid() else self.sampler
        return optuna.create_study(
            study_name=self.study_name,
            storage=open_storage(self.storage, self.sweep_dir),
            sampler=sampler,
            pruner=self.pruner,
            direction=StudyDirection[self.direction.upper()],
            load_if_exists=True,
        )

    def _overrides(self, trial: optuna.trial.Trial, fixed: list[str]) -> list[str]:
        """The trial's job: the fixed overrides, its sampled values, and, for a pruner to
        judge it, its number."""
        sampled = [as_override(key, value) for key, value in trial.params.items()]
        numbered = [f"sweep.trial={trial.number}"] if self.pruner is not None else []
        return [*fixed, *sampled, *numbered]

    def _save_results(self, study: optuna.Study) -> None:
        pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
        results: dict[str, Any] = {"name": "optuna", "pruned_trials": pruned}
        if any(t.state == TrialState.COMPLETE for t in study.trials):
            results |= {"best_params": study.best_trial.params, "best_value": study.best_value}
            log.info(f"Best parameters: {study.best_trial.params}, value {study.best_value}")
        log.info(f"Pruned trials: {len(pruned)} of {len(study.trials)}")
        OmegaConf.save(OmegaConf.create(results), self.sweep_dir / "optimization_results.yaml")


def grid_choices(space: dict[str, BaseDistribution]) -> dict[str, list[Any]]:
    """Every value of each distribution, for the grid sampler (which needs finite choices)."""
    choices: dict[str, list[Any]] = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            choices[key] = list(dist.choices)
        elif isinstance(dist, (IntDistribution, FloatDistribution)) and dist.step is not None:
            low, high, step = dist.low, dist.high, dist.step
            count = round((high - low) / step) + 1
            choices[key] = [low + i * step for i in range(count)]
        else:
            raise ConfigError(
                f"{key}: hydra/sweeper/sampler=grid tries every value, so it needs choice(...) "
                f"or range(...), not a continuous interval"
            )
    return choices


def grid_size(space: dict[str, BaseDistribution]) -> int:
    return math.prod(len(c) for c in grid_choices(space).values())


def _tell(study: optuna.Study, trial: optuna.trial.Trial, ret: JobReturn) -> bool:
    """Finish ``trial`` by its job's end (complete, pruned, failed); False if it failed."""
    value = float(ret.return_value) if ret.status == JobStatus.COMPLETED else math.nan
    if math.isnan(value):
        log.warning(f"trial {trial.number} failed: no objective value")
        _finish(study, trial, state=TrialState.FAIL)
        return False
    if PRUNED_AT in study.trials[trial.number].user_attrs:  # set by the job, in the storage
        _finish(study, trial, state=TrialState.PRUNED)
    else:
        _finish(study, trial, values=value)
    return True


def _finish(study: optuna.Study, trial: optuna.trial.Trial, **end: Any) -> None:
    """``study.tell``; the grid sampler's stop once its grid is done (which Optuna refuses
    outside ``optimize``, after recording the trial) is no error: the grid bounds n_trials."""
    try:
        study.tell(trial, **end)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
