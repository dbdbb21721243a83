"""A trial's side of a pruned sweep: report the objective at each evaluation, ask the pruner.

The sweeper (``xirang_optuna.sweeper``) created the trial in the study and passed its number
as ``sweep.trial``; the run's config names the study (``sweep.study``, filled at launch). The
job opens the same study with the same pruner, so the pruner compares this trial's values with
what every other trial reported at the same steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the study of a sweep whose sweeper names no storage, in the sweep's folder
STUDY_FILE = "optuna-study.json"
#: the user attribute of a trial its job ended early, holding the step
PRUNED_AT = "pruned_at"


def storage_for(storage: str | None, sweep_dir: str | Path) -> Any:
    """An Optuna storage URL the sweeper was given, else the study file in the sweep's folder."""
    if storage:
        return storage
    from xirang_optuna.storage import StudyFile

    return StudyFile(Path(sweep_dir) / STUDY_FILE)


class TrialReport:
    """This job's trial in its study, with the sweep's pruner."""

    def __init__(self, study: dict[str, Any], number: int) -> None:
        import optuna
        from hydra.utils import instantiate

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        loaded = optuna.load_study(
            study_name=study["name"],
            storage=storage_for(study["storage"], study["sweep_dir"]),
            pruner=instantiate(study["pruner"]),
        )
        # Optuna 2.10 maps a trial number to its id only through the storage
        trial_id = loaded._storage.get_trial_id_from_study_id_trial_number(loaded._study_id, number)
        self.trial = optuna.trial.Trial(loaded, trial_id)

    def pruned(self, step: int, value: float) -> bool:
        """Report ``value`` at ``step``; True (recorded on the trial) if the pruner stops it."""
        self.trial.report(value, step)
        if not self.trial.should_prune():
            return False
        self.trial.set_user_attr(PRUNED_AT, step)
        return True
