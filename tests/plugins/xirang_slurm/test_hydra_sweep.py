"""Hydra sweeps go to Slurm: ``python -m xirang -m hydra/launcher=submitit_slurm ...`` submits
one real Slurm job per sweep point (.ci/services/slurm.sh runs the single-node cluster,
.ci/services/slurm_multinode.sh the two-node one)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs
from tests.plugins.xirang_slurm.conftest import MultiNodeSlurm


@pytest.mark.service
@pytest.mark.slow
def test_a_sweep_runs_each_point_as_a_slurm_job_training_across_two_nodes(
    slurm_multinode: MultiNodeSlurm, run_xirang, tmp_path: Path
) -> None:
    """Each sweep point is a submitit job (one task of an array) that runs
    ``scheduler=slurm scheduler.nodes=2``: its training is a job of its own over both nodes.
    One point at a time: a point waiting for its training holds a CPU, and on two 2-CPU nodes
    two of them could hold the CPUs the other's training needs."""
    runs = tmp_path / "runs"
    done = run_xirang(
        "-m",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=15",
        "hydra.launcher.array_parallelism=1",
        "scheduler=slurm",
        "scheduler.nodes=2",
        "parallel=ddp",
        *ONE_LAYER_GPT,
        "trainer.max_steps=2",
        "trainer.log_every=1",
        "trainer.sample_tokens=0",
        "checkpoint=disabled",
        "optim.lr=1e-3,3e-3",
        env={"XIRANG_RUNS": str(runs), "OMP_NUM_THREADS": "1", **slurm_multinode.env},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep,) = [p for p in runs.glob("*/*") if (p / "multirun.yaml").exists()]
    jobs = list((sweep / ".submitit").glob("*_[01]"))
    assert len(jobs) == 2, "each sweep point should be its own Slurm array task"
    assert all(list(job.glob("*_result.pkl")) for job in jobs)
    trials = run_dirs(sweep)
    summaries = [json.loads((d / "summary.json").read_text()) for d in trials]
    assert [(s["steps"], s["world_size"]) for s in summaries] == [(2, 2), (2, 2)]
    for trial in trials:  # its training ran on both nodes, one worker each
        (out,) = trial.glob("slurm-*.out")
        job = slurm_multinode.run("scontrol", "-o", "show", "job", out.stem.removeprefix("slurm-"))
        assert "NumNodes=2 " in job and f"NodeList={slurm_multinode.hostlist} " in job
    with (sweep / "sweep_results.csv").open() as f:
        table = list(csv.DictReader(f))
    assert sorted(r["overrides"].split()[-1] for r in table) == ["optim.lr=0.001", "optim.lr=0.003"]
    assert all(r["final_loss"] for r in table)


@pytest.mark.service
@pytest.mark.slow
def test_a_pruned_optuna_sweep_runs_its_trials_as_slurm_jobs(
    slurm: str, run_xirang, tmp_path: Path
) -> None:
    """Trials in Slurm jobs (other processes) report to the study file in the sweep folder,
    two at a time; the second pair's pruner compares them with the first pair's reports."""
    import optuna
    from xirang_optuna.trial import open_storage

    runs = tmp_path / "runs"
    done = run_xirang(
        "-m",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=15",
        "hydra/sweeper=optuna_pruning",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler.seed=3",
        "optim.lr=tag(log, interval(1e-4, 1e-1))",
        *ONE_LAYER_GPT,
        "trainer.max_steps=10",
        "trainer.eval_every=5",
        "trainer.log_every=5",
        "trainer.sample_tokens=0",
        "checkpoint=disabled",
        env={"XIRANG_RUNS": str(runs), "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep,) = [p for p in runs.glob("*/*") if (p / "multirun.yaml").exists()]
    assert len(list((sweep / ".submitit").glob("*_[01]"))) == 4  # two arrays of two tasks
    study = optuna.load_study(study_name="xirang", storage=open_storage(None, sweep))
    assert [t.state.name in ("COMPLETE", "PRUNED") for t in study.trials] == [True] * 4
    assert all(t.intermediate_values for t in study.trials)  # reported from the Slurm jobs
    with (sweep / "sweep_results.csv").open() as f:
        table = list(csv.DictReader(f))
    pruned = {int(r["pruned_at"]) for r in table if r["pruned_at"]}
    assert len(table) == 4 and pruned <= {5}
    assert sum(t.state.name == "PRUNED" for t in study.trials) == sum(
        bool(r["pruned_at"]) for r in table
    )
