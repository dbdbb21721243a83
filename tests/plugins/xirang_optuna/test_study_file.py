"""The study file every process of a pruned sweep shares: concurrent writers lose nothing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import optuna
from xirang_optuna.storage import StudyFile

WORKERS, REPORTS = 4, 5


def report_trials(path: str, number: int) -> None:
    """One 'job': its trial's intermediate values, then the trial's end, as a sweep does."""
    study = optuna.load_study(study_name="s", storage=StudyFile(path))
    trial = optuna.trial.Trial(study, study.trials[number]._trial_id)
    for step in range(REPORTS):
        trial.report(number + step / 10, step)
    study.tell(trial, float(number))


def test_concurrent_jobs_report_to_one_study(tmp_path: Path) -> None:
    path = str(tmp_path / "study.pickle")
    study = optuna.create_study(study_name="s", storage=StudyFile(path))
    numbers = [study.ask().number for _ in range(WORKERS)]
    context = multiprocessing.get_context("spawn")  # separate interpreters, as Slurm jobs are
    jobs = [context.Process(target=report_trials, args=(path, n)) for n in numbers]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=120)
        assert job.exitcode == 0
    trials = optuna.load_study(study_name="s", storage=StudyFile(path)).trials
    assert [t.value for t in trials] == [float(n) for n in numbers]
    assert all(len(t.intermediate_values) == REPORTS for t in trials)
