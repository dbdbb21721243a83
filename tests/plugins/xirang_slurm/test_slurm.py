"""The Slurm executor against a real single-node Slurm (.ci/services/slurm.sh starts it).

Without Slurm these tests skip locally and FAIL in CI (CI=true), where the service must run.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from xirang_slurm import commands, inventory
from xirang_slurm.executor import SlurmExecutor, workers_per_node
from xirang_slurm.script import BatchJob, render
from xirang_slurm.task import check_world

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry


def _wait(executor: SlurmExecutor, timeout: float = 90.0) -> list[tuple[int, bool]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = executor.poll()
        if ended:
            return ended
        time.sleep(0.5)
    raise AssertionError("the Slurm job did not end in time")


def _job(job_id: int, command: list[str], devices: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        id=job_id, devices=tuple(range(devices)), device_type="cpu", payload={"command": command}
    )


@pytest.mark.service
def test_inventory_reads_the_real_node_and_its_switch(slurm: str) -> None:
    nodes = {n["name"]: n for n in inventory.nodes()}
    assert nodes[slurm]["type"] == "cpu"
    assert nodes[slurm]["devices"] >= 1
    assert nodes[slurm]["leaf"] == "leaf0"


@pytest.mark.service
def test_placed_job_runs_on_the_chosen_node(slurm: str, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path)
    marker = tmp_path / "ran-on"
    executor.start(_job(7, ["bash", "-c", f"echo $SLURMD_NODENAME > {marker}"]), [slurm], 1)
    script = (tmp_path / "job-7.sbatch").read_text()
    assert f"--nodelist={slurm}" in script and "--switches=1" in script
    assert _wait(executor) == [(7, True)]
    assert marker.read_text().strip() == slurm


@pytest.mark.service
def test_an_ended_job_reports_when_it_ended_for_cost_metering(slurm: str, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path)
    before = time.time()
    executor.start(_job(11, ["bash", "-c", "true"]), [slurm], 1)
    assert _wait(executor) == [(11, True)]
    ended = executor.usage(11)["run_ended_at"]
    assert before - 2 <= ended <= time.time() + 1  # Slurm's EndTime has whole seconds
    assert executor.usage(11) == {}  # reported once


@pytest.mark.service
def test_failed_job_is_reported_as_failed(slurm: str, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path)
    executor.start(_job(8, ["bash", "-c", "exit 3"]), [slurm], 1)
    assert _wait(executor) == [(8, False)]


@pytest.mark.service
def test_preempted_job_is_signalled_and_cancelled(slurm: str, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path)
    job = _job(
        9,
        [
            "bash",
            "-c",
            "trap 'echo term > $0.term; exit 0' TERM; sleep 120 & wait",
            str(tmp_path / "w"),
        ],
    )
    slurm_id = executor.start(job, [slurm], 1)
    deadline = time.monotonic() + 60
    while commands.job_state(slurm_id)[0] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    executor.stop(job, "preempted")
    assert executor.poll() == []  # a stopped job is the pool's to requeue, not an ending
    deadline = time.monotonic() + 60
    while commands.job_state(slurm_id)[0] in ("RUNNING", "PENDING", "COMPLETING"):
        assert time.monotonic() < deadline
        time.sleep(0.5)


@pytest.mark.service
def test_drain_and_resume_through_scontrol(slurm: str) -> None:
    commands.drain(slurm, "xirang test: failing probe")
    try:
        state = subprocess.run(
            ["sinfo", "-h", "-n", slurm, "-o", "%T"], capture_output=True, text=True
        ).stdout
        assert "drain" in state
        assert not {n["name"]: n for n in inventory.nodes()}[slurm]["healthy"]
    finally:
        commands.resume(slurm)


def test_hostlists_and_gres_are_parsed() -> None:
    assert inventory.expand_hostlist("gpu[01-03],cpu1") == ["gpu01", "gpu02", "gpu03", "cpu1"]
    text = (
        "NodeName=g1 CPUTot=64 Gres=gpu:a100:8(S:0-1) State=IDLE\nNodeName=c1 CPUTot=4 "
        "Gres=(null) State=IDLE+DRAIN"
    )
    specs = inventory.node_specs(text, {"g1": "sw1"})
    assert specs[0] | {} == {
        "name": "g1",
        "type": "a100",
        "devices": 8,
        "leaf": "sw1",
        "spine": "spine0",
        "healthy": True,
    }
    assert (specs[1]["type"], specs[1]["devices"], specs[1]["healthy"]) == ("cpu", 4, False)


def test_script_asks_each_node_for_its_devices_and_starts_one_task_per_worker() -> None:
    text = render(
        BatchJob(
            "xirang-1",
            run_dir="/runs/r",
            nodes=["a", "b"],
            procs_per_node=4,
            switches=1,
            device="cuda",
        )
    )
    assert "#SBATCH --nodelist=a,b" in text and "#SBATCH --nodes=2" in text
    assert "#SBATCH --switches=1" in text and "#SBATCH --gpus-per-node=4" in text
    assert "#SBATCH --ntasks-per-node=4" in text and "#SBATCH --requeue" in text
    assert "srun --kill-on-bad-exit=1" in text and "xirang_slurm.task /runs/r" in text
    assert "--gres=npu:2" in render(BatchJob("x", run_dir="/r", procs_per_node=2, device="ascend"))
    cpu = render(BatchJob("x", run_dir="/r", procs_per_node=2, threads_per_proc=3))
    assert "--cpus-per-task=3" in cpu and "gpus" not in cpu and "gres" not in cpu


@pytest.mark.service
def test_the_pool_executor_places_a_job_over_two_nodes(
    slurm_multinode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A placement over two nodes of the multi-node cluster: ``--nodelist`` names both, and the
    job runs on each of them, at two addresses."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_multinode.conf))
    executor = SlurmExecutor(tmp_path)
    marker = tmp_path / "ran-on"
    where = f"echo $SLURMD_NODENAME $(hostname -I) >> {marker}"
    executor.start(_job(12, ["bash", "-c", where], devices=2), list(slurm_multinode.nodes), 1)
    script = (tmp_path / "job-12.sbatch").read_text()
    assert f"--nodelist={','.join(slurm_multinode.nodes)}" in script and "--nodes=2" in script
    assert _wait(executor) == [(12, True)]
    ran = dict(line.split(maxsplit=1) for line in marker.read_text().splitlines())
    assert sorted(ran) == list(slurm_multinode.nodes) and len(set(ran.values())) == 2


def test_the_pool_executor_starts_as_many_workers_as_the_run_split_its_batch_over() -> None:
    """A run's ``trainer.nproc`` workers, spread over the nodes the pool chose, whatever the
    devices placed (4 tasks for a config whose micro-batches were sized for 2 workers would
    train half its global batch per step, or none); a plain command runs once per device."""
    assert workers_per_node({"run_dir": "/r", "nproc": 2}, devices=4, nodes=2) == 1
    assert workers_per_node({"run_dir": "/r", "nproc": 4}, devices=4, nodes=1) == 4
    assert workers_per_node({"command": ["true"]}, devices=4, nodes=2) == 2


def test_a_job_whose_tasks_are_not_the_runs_workers_is_refused_by_its_tasks() -> None:
    """3 workers placed over 2 nodes start 1 task per node: each task refuses to train a
    third of the batch as if it were a half, in one line naming the run's worker count."""
    three = ["scheduler=pool", "parallel=ddp", "trainer.nproc=3", "trainer.global_batch=12"]
    config = compose(three, get_registry())
    check_world(config, 3)
    with pytest.raises(ConfigError, match=r"runs 2 task\(s\) but .* over 3 worker\(s\)"):
        check_world(config, 2)


def test_the_batch_is_split_over_every_node_s_workers() -> None:
    """scheduler.nodes x trainer.nproc workers share trainer.global_batch; a batch that does
    not divide over them is refused naming both keys, before anything is submitted."""
    registry = get_registry()
    two_nodes = ["scheduler=slurm", "scheduler.nodes=2", "parallel=ddp"]
    config = compose([*two_nodes, "trainer.global_batch=8"], registry)
    assert config["trainer"]["micro_batch"] == 4  # 8 sequences over 2 nodes x 1 worker
    with pytest.raises(ConfigError, match=r"scheduler.nodes=2 x trainer.nproc=2 \(4 workers\)"):
        compose([*two_nodes, "trainer.nproc=2", "trainer.global_batch=6"], registry)
    with pytest.raises(ConfigError, match=r"scheduler\.nodes=0: must be"):
        compose(["scheduler=slurm", "scheduler.nodes=0"], registry)


def srun_torchrun(folder: Path, *torchrun_args: str, run: tuple[str, ...], ok: bool = True) -> str:
    """``srun torchrun --nproc-per-node=2 TORCHRUN_ARGS -m xirang RUN`` as the one task of a
    batch job (``sbatch --wait``) run in ``folder``: the job's output, the job having
    succeeded (``ok``) or failed."""
    import sys

    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2"]
    script = folder / "torchrun.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=1 --ntasks=1 --cpus-per-task=2\n"
        f"#SBATCH --output={folder}/job.out\n"
        f"cd {folder}\nsrun {' '.join([*torchrun, *torchrun_args, '-m', 'xirang', *run])}\n"
    )
    done = subprocess.run(["sbatch", "--wait", str(script)], capture_output=True, text=True)
    output = (folder / "job.out").read_text() if (folder / "job.out").exists() else ""
    assert (done.returncode == 0) == ok, done.stderr + output[-3000:]
    return output


@pytest.mark.service
@pytest.mark.slow
def test_srun_torchrun_trains_on_torchruns_world(slurm: str, tmp_path: Path) -> None:
    """The recipe Slurm sites use for torch jobs, ``srun torchrun --nproc-per-node=2 -m
    xirang``: one Slurm task whose torchrun starts two workers. The run takes torchrun's world
    (two workers, one run directory), not the Slurm task count of one."""
    import json

    from tests.conftest import ONE_LAYER_GPT, run_dirs

    run = ("parallel=ddp", "trainer.max_steps=2", "trainer.sample_tokens=0", *ONE_LAYER_GPT)
    srun_torchrun(tmp_path, run=run)
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["world_size"], summary["steps"]) == (2, 2) and summary["tokens"] > 0


@pytest.mark.service
@pytest.mark.slow
def test_srun_torchrun_restarts_a_killed_rank_into_the_same_run(slurm: str, tmp_path: Path) -> None:
    """``srun torchrun --max-restarts=1`` with rank 1 killed after step 3 (the drill's kill):
    torchrun restarts the group inside the Slurm step, and the restart continues the same run
    directory from its step-2 checkpoint to the end, as under torchrun alone."""
    import json

    from tests.conftest import ONE_LAYER_GPT, run_dirs

    run = (
        "parallel=ddp", *ONE_LAYER_GPT, "trainer.max_steps=5", "trainer.sample_tokens=0",
        "trainer.eval_batches=1", "checkpoint.interval=2", "checkpoint.async_save=false",
        "'+drill.kill=[[3,1]]'",
    )  # fmt: skip
    output = srun_torchrun(tmp_path, "--max-restarts=1", run=run)
    [run_dir] = run_dirs(tmp_path)  # the restart did not start another run
    assert "resumed from checkpoint step 2" in output
    assert not (run_dir / "resume.json").exists()  # completed: nothing left to resume
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 5


@pytest.mark.service
@pytest.mark.slow
def test_the_resume_hint_of_srun_torchrun_repeats_srun(slurm: str, tmp_path: Path) -> None:
    """With no restart left the killed rank ends the job; the command that resumes the run is
    the Slurm step's ``srun`` (its nodes, tasks and CPUs) before the torchrun command: the
    torchrun command alone would train on whatever node it is typed."""
    import json

    from tests.conftest import ONE_LAYER_GPT, run_dirs

    run = (
        "parallel=ddp", *ONE_LAYER_GPT, "trainer.max_steps=5", "trainer.sample_tokens=0",
        "checkpoint.interval=2", "checkpoint.async_save=false", "'+drill.kill=[[3,1]]'",
    )  # fmt: skip
    srun_torchrun(tmp_path, "--max-restarts=0", run=run, ok=False)
    [run_dir] = run_dirs(tmp_path)
    state = json.loads((run_dir / "resume.json").read_text())
    typed = (
        "srun --nodes=1 --ntasks=1 --cpus-per-task=2 python -m torch.distributed.run "
        "--nproc-per-node=2 --max-restarts=0 -m xirang parallel=ddp"
    )
    assert typed in state["command"] and typed in state["how"]
