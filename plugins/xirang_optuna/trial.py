"""A trial's side of a pruned sweep: report the objective at each evaluation, ask the pruner.

The sweeper (``xirang_optuna.sweeper``) created the trial in the study and passed its number
as ``sweep.trial``; the run's config names the study (``sweep.study``, filled at launch). The
job opens the same study with the same pruner, so the pruner compares this trial's values with
what every other trial reported at the same steps.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from xirang import ConfigError

#: the study of a sweep whose sweeper names no storage: an SQLite database in the sweep folder
STUDY_FILE = "optuna-study.db"
#: the user attribute of a trial its job ended early, holding the step
PRUNED_AT = "pruned_at"
#: where a study's database URL may come from instead of the sweeper's settings, so that a URL
#: carrying a password reaches no config written to disk
STORAGE_ENV = "XIRANG_OPTUNA_STORAGE"
#: seconds an SQLite writer waits for another's lock (jobs of one sweep report at once)
SQLITE_WAIT_S = 60


def open_storage(storage: str | None, sweep_dir: str | Path) -> Any:
    """Optuna's database storage at the URL the sweeper was given, else at
    :data:`STORAGE_ENV`'s, else the sweep folder's SQLite file; writers of one SQLite file wait
    for each other rather than fail."""
    import optuna

    url = storage or os.environ.get(STORAGE_ENV) or f"sqlite:///{Path(sweep_dir) / STUDY_FILE}"
    engine = {"connect_args": {"timeout": SQLITE_WAIT_S}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=engine)


def check_storage(storage: str | None) -> None:
    """A URL in ``hydra.sweeper.storage`` is copied into every trial's config.yaml: refuse one
    that carries a password, naming where it goes instead."""
    if storage and urlsplit(storage).password:
        raise ConfigError(
            f"hydra.sweeper.storage: {redacted(storage)} carries a password, which every trial "
            f"would write into its config.yaml; leave hydra.sweeper.storage unset and export "
            f"{STORAGE_ENV}=<the URL> instead (the sweeper and every job read it)"
        )


def redacted(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


class TrialReport:
    """This job's trial in its study, with the sweep's pruner."""

    def __init__(self, study: dict[str, Any], number: int) -> None:
        import optuna
        from hydra.utils import instantiate

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = open_storage(study["storage"], study["sweep_dir"])
        loaded = optuna.load_study(
            study_name=study["name"], storage=storage, pruner=instantiate(study["pruner"])
        )
        study_id = storage.get_study_id_from_name(study["name"])
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        self.trial = optuna.trial.Trial(loaded, trial_id)

    def pruned(self, step: int, value: float) -> bool:
        """Report ``value`` at ``step``; True (recorded on the trial) if the pruner stops it."""
        self.trial.report(value, step)
        if not self.trial.should_prune():
            return False
        self.trial.set_user_attr(PRUNED_AT, step)
        return True
