"""``hydra/sweeper=optuna_pruning``: hydra-optuna-sweeper's search, plus trials that stop early.

It extends hydra-optuna-sweeper: the same settings, search-space overrides
(``'optim.lr=tag(log, interval(1e-4, 1e-1))'``) and samplers, reusing its parsing and trial
set-up. What it adds: an Optuna pruner (``hydra.sweeper.pruner``, successive halving by
default), a study every job can open (a file in the sweep folder unless ``storage`` names
one), and each job's trial number passed as ``sweep.trial`` so that the job reports its
objective at every evaluation. A job the pruner stops ends cleanly and marks its trial; this
sweeper tells the study the trial was pruned, so samplers and pruners treat it as such.
"""

from __future__ import annotations

import functools
import logging
import math
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import (
    OptunaSweeperImpl,
    create_params_from_overrides,
)
from omegaconf import OmegaConf
from optuna.trial import TrialState

from xirang_optuna.trial import PRUNED_AT, storage_for

log = logging.getLogger(__name__)


class PruningSearch(OptunaSweeperImpl):
    """hydra-optuna-sweeper's search with a pruner; :mod:`xirang_optuna.hydra_sweeper` is the
    Hydra plugin that runs it."""

    def __init__(self, pruner: Any, **settings: Any) -> None:
        super().__init__(**settings)
        self.pruner = pruner

    def sweep(self, arguments: list[str]) -> None:
        """Ask a batch of ``n_jobs`` trials, launch them, tell each one's end; ``n_trials``."""
        Path(self.sweep_dir).mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, Path(self.sweep_dir) / "multirun.yaml")  # as Hydra's own
        study = self._study()
        space, fixed = self._search_space(arguments)
        if isinstance(self.sampler, functools.partial):  # sampler=grid wants the choices
            grid = {name: self._to_grid_sampler_choices(d) for name, d in space.items()}
            self.sampler = study.sampler = self.sampler(grid)
            self.n_trials = min(self.n_trials, math.prod(len(c) for c in grid.values()))
        left = self.n_trials
        while left > 0:
            trials = [study.ask() for _ in range(min(self.n_jobs, left))]
            configured = self._configure_trials(trials, space, fixed)
            overrides = [
                (*params, f"sweep.trial={trial.number}")
                for trial, params in zip(trials, configured, strict=True)
            ]
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
            self.job_idx += len(returns)
            ended = zip(trials, returns, strict=True)
            failed = [ret for trial, ret in ended if not _tell(study, trial, ret)]
            if len(failed) / len(returns) > self.max_failure_rate:
                for ret in failed:
                    _ = ret.return_value  # raises the job's own error
                raise RuntimeError(f"{len(failed)} of {len(returns)} trials failed")
            left -= len(trials)
        self._save_results(study)

    def _study(self) -> optuna.Study:
        directions = self._get_directions()
        if len(directions) != 1:
            raise ValueError(f"a pruned sweep optimises one objective, not {directions}")
        return optuna.create_study(
            study_name=self.study_name,
            storage=storage_for(self.storage, self.sweep_dir),
            sampler=self.sampler,
            pruner=self.pruner,
            direction=directions[0],
            load_if_exists=True,
        )

    def _search_space(self, arguments: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Distributions to sample and fixed values, from ``params`` and the command line."""
        self._process_searchspace_config()
        space, fixed = create_params_from_overrides(
            [*self._parse_sweeper_params_config(), *arguments]
        )
        space = {**(self.search_space_distributions or {}), **space}
        return {k: v for k, v in space.items() if k not in fixed}, fixed

    def _save_results(self, study: optuna.Study) -> None:
        pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
        results = {"name": "optuna_pruning", "pruned_trials": pruned}
        if any(t.state == TrialState.COMPLETE for t in study.trials):
            results |= {"best_params": study.best_trial.params, "best_value": study.best_value}
            log.info(f"Best parameters: {study.best_trial.params}, value {study.best_value}")
        log.info(f"Pruned trials: {len(pruned)} of {len(study.trials)}")
        OmegaConf.save(OmegaConf.create(results), f"{self.sweep_dir}/optimization_results.yaml")


def _tell(study: optuna.Study, trial: optuna.trial.Trial, ret: JobReturn) -> bool:
    """Finish ``trial`` by its job's end (complete, pruned, failed); False if it failed."""
    value = float(ret.return_value) if ret.status == JobStatus.COMPLETED else math.nan
    if math.isnan(value):
        log.warning(f"trial {trial.number} failed: no objective value")
        _finish(study, trial, state=TrialState.FAIL)
        return False
    if PRUNED_AT in trial.user_attrs:
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
