"""An Optuna storage in one file that every process of a sweep shares: the study of a pruned
sweep lives in its sweep folder, and each trial's job (in this process, under torchrun, or a
Slurm job on another node of a shared filesystem) reports to it.

Optuna 2.10 (what hydra-optuna-sweeper pins) offers no file storage, and its SQLite storage
does not work with SQLAlchemy 2. Each call here takes an exclusive ``flock`` on a lock file
beside the study, loads the study (Optuna's own in-memory storage, pickled), runs the call on
it, and replaces the file atomically when the call changed it. A sweep's calls are few (a
report per evaluation, a handful per trial), so reading the whole study each time is cheap.
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import os
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage, InMemoryStorage


class StudyFile(BaseStorage):
    """``BaseStorage`` over the pickled ``InMemoryStorage`` at ``path``, one locked call at a
    time; every method ``InMemoryStorage`` implements is delegated (see :func:`_delegate`)."""

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
            before = self.path.read_bytes() if self.path.exists() else b""
            study = pickle.loads(before) if before else InMemoryStorage()
            yield study
            after = pickle.dumps(study)
            if after != before:
                partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                partial.write_bytes(after)
                os.replace(partial, self.path)


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
