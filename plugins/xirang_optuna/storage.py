"""An Optuna storage in one file that every process of a sweep shares: the study of a pruned
sweep lives in its sweep folder, and each trial's job (in this process, under torchrun, or a
Slurm job on another node of a shared filesystem) reports to it.

Optuna 2.10 (what hydra-optuna-sweeper pins) offers no file storage, and its SQLite storage
does not work with SQLAlchemy 2. Each call here takes an exclusive ``flock`` on a lock file
beside the study, reads the study (Optuna's own in-memory storage, kept as JSON: nothing here
unpickles a file that another user of the shared folder could have written), runs the call on
it, and replaces the file atomically when the call changed it. A sweep's calls are few (a
report per evaluation, a handful per trial), so reading the whole study each time is cheap.
"""

from __future__ import annotations

import abc
import contextlib
import datetime
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.storages._in_memory import _StudyInfo
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


class StudyFile(BaseStorage):
    """``BaseStorage`` over the ``InMemoryStorage`` kept as JSON at ``path``, one locked call at
    a time; every method ``InMemoryStorage`` implements is delegated (see :func:`_delegate`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"StudyFile({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:  # a storage travels to Slurm jobs as its path
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])

    @contextlib.contextmanager
    def _study(self) -> Iterator[InMemoryStorage]:
        """The study under the lock; written back (atomically) if the call changed it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            before = self.path.read_text() if self.path.exists() else ""
            study = storage_from_json(before) if before else InMemoryStorage()
            yield study
            after = storage_to_json(study)
            if after != before:
                partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                partial.write_text(after)
                os.replace(partial, self.path)


def storage_to_json(storage: InMemoryStorage) -> str:
    """Every study of ``storage`` as JSON (attributes are JSON already: Optuna requires it)."""
    studies = {str(sid): _study_to_dict(info) for sid, info in storage._studies.items()}
    return json.dumps(
        {
            "studies": studies,
            "max_study_id": storage._max_study_id,
            "max_trial_id": storage._max_trial_id,
        },
        sort_keys=True,
    )


def storage_from_json(text: str) -> InMemoryStorage:
    """The storage :func:`storage_to_json` wrote, with its indexes rebuilt."""
    data = json.loads(text)
    storage = InMemoryStorage()
    for sid, study in data["studies"].items():
        info = _study_from_dict(study)
        storage._studies[int(sid)] = info
        storage._study_name_to_id[info.name] = int(sid)
        for trial in info.trials:
            storage._trial_id_to_study_id_and_number[trial._trial_id] = (int(sid), trial.number)
    storage._max_study_id, storage._max_trial_id = data["max_study_id"], data["max_trial_id"]
    return storage


def _study_to_dict(info: _StudyInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "directions": [d.name for d in info.directions],
        "user_attrs": info.user_attrs,
        "system_attrs": info.system_attrs,
        "best_trial_id": info.best_trial_id,
        "param_distribution": {
            k: distribution_to_json(v) for k, v in info.param_distribution.items()
        },
        "trials": [_trial_to_dict(t) for t in info.trials],
    }


def _study_from_dict(data: dict[str, Any]) -> _StudyInfo:
    info = _StudyInfo(data["name"])
    info.directions = [StudyDirection[d] for d in data["directions"]]
    info.user_attrs, info.system_attrs = data["user_attrs"], data["system_attrs"]
    info.best_trial_id = data["best_trial_id"]
    info.param_distribution = {
        k: json_to_distribution(v) for k, v in data["param_distribution"].items()
    }
    info.trials = [_trial_from_dict(t) for t in data["trials"]]
    return info


def _trial_to_dict(trial: FrozenTrial) -> dict[str, Any]:
    def when(moment: datetime.datetime | None) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "number": trial.number,
        "trial_id": trial._trial_id,
        "state": trial.state.name,
        "values": trial.values,
        "datetime_start": when(trial.datetime_start),
        "datetime_complete": when(trial.datetime_complete),
        "params": trial.params,
        "distributions": {k: distribution_to_json(v) for k, v in trial.distributions.items()},
        "user_attrs": trial.user_attrs,
        "system_attrs": trial.system_attrs,
        "intermediate_values": [[s, v] for s, v in trial.intermediate_values.items()],
    }


def _trial_from_dict(data: dict[str, Any]) -> FrozenTrial:
    def when(text: str | None) -> datetime.datetime | None:
        return datetime.datetime.fromisoformat(text) if text else None

    return FrozenTrial(
        number=data["number"],
        state=TrialState[data["state"]],
        value=None,
        values=data["values"],
        datetime_start=when(data["datetime_start"]),
        datetime_complete=when(data["datetime_complete"]),
        params=data["params"],
        distributions={k: json_to_distribution(v) for k, v in data["distributions"].items()},
        user_attrs=data["user_attrs"],
        system_attrs=data["system_attrs"],
        intermediate_values={int(s): v for s, v in data["intermediate_values"]},
        trial_id=data["trial_id"],
    )


def _delegate(name: str) -> Callable[..., Any]:
    def call(self: StudyFile, *args: Any, **kwargs: Any) -> Any:
        with self._study() as study:
            return getattr(study, name)(*args, **kwargs)

    call.__name__ = name
    call.__doc__ = getattr(InMemoryStorage, name).__doc__
    return call


for _name, _member in vars(InMemoryStorage).items():
    if callable(_member) and not _name.startswith("_"):
        setattr(StudyFile, _name, _delegate(_name))
abc.update_abstractmethods(StudyFile)
