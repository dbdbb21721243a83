"""Sweeps that search and prune: ``hydra/sweeper=optuna`` (an Optuna search over Hydra's
sweep syntax, on Optuna's database storage), ``optuna_pruning`` (the same, plus a pruner that
stops bad trials at an evaluation) and each trial's report to its study. Optuna is imported
only by a sweep and by the jobs of one."""

from typing import Any

from xirang import conf_folder, hookimpl
from xirang.specs import WorkerContext

#: open trials of this process, by run directory (one per run; a job reports many times)
_reports: dict[str, Any] = {}


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)


@hookimpl
def xirang_should_prune(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> bool | None:
    """Report this evaluation's objective to the run's trial; True if its pruner stops it."""
    from xirang.sweep import intermediate

    sweep = ctx.config["sweep"]
    value = intermediate(metrics, sweep["objective"])
    if value is None or "study" not in sweep:
        return None
    if ctx.run_dir not in _reports:
        from xirang_optuna.trial import TrialReport

        _reports[ctx.run_dir] = TrialReport(sweep["study"], sweep["trial"])
    return _reports[ctx.run_dir].pruned(step, value)


@hookimpl
def xirang_hydra_plugins() -> list[str]:
    return ["xirang_optuna.hydra_sweeper:OptunaSweeper"]
