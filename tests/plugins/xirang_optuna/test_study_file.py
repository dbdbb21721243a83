"""The study file every process of a pruned sweep shares: concurrent writers lose nothing."""

from __future__ import annotations

import json
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
    path = str(tmp_path / "study.json")
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


def test_the_study_file_is_json_and_round_trips_every_trial(tmp_path: Path) -> None:
    """The shared folder holds data, not a pickle: a file another user wrote cannot run code."""
    path = tmp_path / "study.json"
    study = optuna.create_study(study_name="s", storage=StudyFile(path), direction="minimize")
    study.optimize(lambda t: t.suggest_float("lr", 1e-4, 1e-1, log=True), n_trials=3)
    pruned = study.ask({"lr": optuna.distributions.LogUniformDistribution(1e-4, 1e-1)})
    pruned.report(0.5, 3)
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    json.loads(path.read_text())  # plain JSON
    again = optuna.load_study(study_name="s", storage=StudyFile(path)).trials
    assert [t.params for t in again] == [t.params for t in study.trials]
    assert again[-1].state == optuna.trial.TrialState.PRUNED
    assert again[-1].intermediate_values == {3: 0.5}
    assert min(t.value for t in again[:3]) == study.best_value
