"""The study every process of a sweep shares is Optuna's own database storage (SQLite in the
sweep folder by default): jobs in other interpreters report to it at once and lose nothing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import optuna
import pytest
from xirang_optuna.trial import STUDY_FILE, TrialReport, check_storage, open_storage

from xirang import ConfigError

WORKERS, REPORTS = 4, 5
NOP = {"_target_": "optuna.pruners.NopPruner"}


def report_trial(sweep_dir: str, number: int) -> None:
    """One job: its trial's reports at each evaluation, as a pruned run makes them."""
    report = TrialReport(
        {"storage": None, "name": "s", "pruner": NOP, "sweep_dir": sweep_dir}, number
    )
    for step in range(REPORTS):
        assert not report.pruned(step, number + step / 10)


def test_concurrent_jobs_report_to_one_study(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="s", storage=open_storage(None, tmp_path))
    numbers = [study.ask().number for _ in range(WORKERS)]
    context = multiprocessing.get_context("spawn")  # separate interpreters, as Slurm jobs are
    jobs = [context.Process(target=report_trial, args=(str(tmp_path), n)) for n in numbers]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=120)
        assert job.exitcode == 0
    assert (tmp_path / STUDY_FILE).read_bytes().startswith(b"SQLite format 3")
    trials = optuna.load_study(study_name="s", storage=open_storage(None, tmp_path)).trials
    assert [len(t.intermediate_values) for t in trials] == [REPORTS] * WORKERS
    assert trials[2].intermediate_values[4] == pytest.approx(2.4)


def test_a_storage_url_with_a_password_is_refused_without_printing_it() -> None:
    with pytest.raises(ConfigError) as refused:
        check_storage("postgresql://optuna:hunter2@db.internal/sweeps")
    assert "hunter2" not in str(refused.value)
    assert "XIRANG_OPTUNA_STORAGE" in str(refused.value)
    check_storage("postgresql://optuna@db.internal/sweeps")  # a password from .pgpass is fine
