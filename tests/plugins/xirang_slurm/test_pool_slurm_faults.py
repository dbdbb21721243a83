"""The pool keeps serving when the real single-node Slurm refuses or stalls: a job Slurm holds
pending is cancelled with a plain scancel, at once; while slurmctld is stopped (SIGSTOP) the
pool answers every request and shows the jobs it cannot vouch for as ``submitting``; an sbatch
whose answer was lost is found by its name, never failed while Slurm may run it, and a pool
job never has two live Slurm jobs. Each stall is resumed (SIGCONT) in a ``finally``: other
tests share this Slurm."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from xirang_slurm import commands
from xirang_slurm.executor import INTENT, SlurmExecutor

from tests.plugins.xirang_slurm.test_pool_service import OPERATOR, account  # noqa: F401
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

#: the single-node cluster's slurmctld (SlurmctldPidFile of .ci/services/slurm.sh's config)
CONTROLLER_PID = Path("/run/slurmctld.pid")


@contextlib.contextmanager
def stalled_controller(seconds: float, stopped: threading.Event) -> Iterator[None]:
    """slurmctld stopped (SIGSTOP) for at most ``seconds``: a timer resumes it, and so does
    leaving the block, whatever happens in it. ``stopped`` is set while it is stopped."""
    pid = int(CONTROLLER_PID.read_text())

    def resume() -> None:
        stopped.clear()
        os.kill(pid, signal.SIGCONT)

    timer = threading.Timer(seconds, resume)
    os.kill(pid, signal.SIGSTOP)
    stopped.set()
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        resume()


@pytest.fixture
def service(slurm: str, tmp_path: Path, account: str) -> Iterator[PoolService]:  # noqa: F811
    """A pool on the single node (four cards, two CPUs for Slurm) of two projects running as
    ``account``."""
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": slurm, "type": "cpu", "devices": 4}]
    projects = [
        {"name": p, "guaranteed": 2, "run_as": account, "shared_account": True}
        for p in ("nlp", "cv")
    ]
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    pool = PoolService(
        PoolStore(tmp_path / "pool.db"), cluster, "priority", OPERATOR, SlurmExecutor(tmp_path)
    )
    try:
        yield pool
    finally:
        executor: SlurmExecutor = pool.executor  # type: ignore[assignment]
        for slurm_id in [*executor.slurm_ids.values()]:
            commands.cancel(slurm_id)
        for name in executor.unresolved.values():
            with contextlib.suppress(commands.SlurmError):
                commands.run("scancel", f"--name={name}")
        pool.close()


@pytest.fixture
def full_node() -> Iterator[str]:
    """The node's two CPUs taken by a Slurm job of no pool's: the pool's next job pends."""
    blocker = commands.run(
        "sbatch", "--parsable", "--output=/dev/null", "-n", "2", "--wrap", "sleep 120"
    ).strip()
    try:
        yield blocker.split(";")[0]
    finally:
        commands.cancel(blocker.split(";")[0])


def _submit(pool: PoolService, project: str, command: list[str]) -> dict:
    body = {"project": project, "cards": 1, "payload": {"command": command}}
    return pool.submit(OPERATOR_WHO, body)


def _live(name: str) -> list[str]:
    """The ids of the Slurm jobs named ``name`` that are pending or running."""
    out = commands.run("squeue", "-h", f"--name={name}", "--states=PENDING,RUNNING", "-o", "%i")
    return out.split()


def _until(
    check: Callable[[], bool], what: str, pool: PoolService | None = None, timeout: float = 90
) -> None:
    """Tick ``pool`` (if given) until ``check()``; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        if pool is not None:
            pool.tick()
            pool.settle()
        time.sleep(0.3)


def test_a_job_slurm_holds_pending_is_cancelled_and_gone_from_slurm(
    service: PoolService, full_node: str
) -> None:
    """slurmctld refuses to signal a job that has not started ("Job can not be altered now")
    and scancel retried that for a minute, under the pool's lock; now the cancel answers at
    once, the pool serves on, and the pending Slurm job is cancelled, never to run."""
    job = _submit(service, "nlp", ["sleep", "30"])
    service.settle()
    slurm_id = service.executor.slurm_ids[job["id"]]  # type: ignore[attr-defined]
    _until(lambda: commands.job_state(slurm_id)[0] == "PENDING", "the job pends behind the node")
    cancelled = service.cancel(OPERATOR_WHO, job["id"])
    assert cancelled["state"] == "cancelled"
    service.settle()
    assert commands.job_state(slurm_id)[0] in ("CANCELLED", "UNKNOWN")
    other = _submit(service, "cv", ["true"])  # the pool serves on: the next job is placed
    assert other["state"] in ("submitting", "running")


def test_while_slurmctld_is_stopped_the_pool_answers_and_loses_no_job(
    service: PoolService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With slurmctld stopped, two tenants' submits and reads are answered while it is still
    stopped (the sbatch waits in the actor, not in the request); their jobs show
    ``submitting`` and a job already running ``unknown``, never ``failed`` or ``running``.
    Once it wakes, each job submitted meanwhile is found by its name (its sbatch got no
    answer), runs once, and ends ``done``."""
    monkeypatch.setattr(commands, "TIMEOUT", 2.0)  # the sbatch gives up inside the stall
    service.executor.grace = 5.0  # type: ignore[attr-defined]
    running = _submit(service, "nlp", ["sleep", "8"])
    service.settle()
    _until(lambda: service.job(OPERATOR_WHO, running["id"])["state"] == "running", "it runs")
    stopped = threading.Event()
    answered_while_stopped = []
    with stalled_controller(15, stopped):
        ids = []
        for project in ("nlp", "cv"):
            job = _submit(service, project, ["sleep", "2"])
            answered_while_stopped.append(stopped.is_set())
            assert job["state"] == "submitting"
            ids.append(job["id"])
        service.jobs(OPERATOR_WHO)
        answered_while_stopped.append(stopped.is_set())
        service.tick()  # two sbatches and a poll, 2 s each, go unanswered
        service.settle()
        states = {row["id"]: row["state"] for row in service.jobs(OPERATOR_WHO)}
        answered_while_stopped.append(stopped.is_set())
    assert all(answered_while_stopped), "a request waited for the stopped slurmctld"
    assert states == {running["id"]: "unknown", ids[0]: "submitting", ids[1]: "submitting"}
    _until(
        lambda: all(service.job(OPERATOR_WHO, i)["state"] == "done" for i in ids),
        "both jobs run and end done",
        service,
    )
    for job_id in ids:
        name = f"{INTENT}{service.store.meta('store_id')}-{job_id}-"
        ran = commands.run("squeue", "-h", "--states=all", "-o", "%j %T")
        runs = [line for line in ran.splitlines() if line.startswith(name)]
        assert len(runs) == 1 and runs[0].endswith("COMPLETED"), runs


def test_a_stray_slurm_job_of_a_pool_job_is_cancelled_the_tracked_one_runs_on(
    service: PoolService,
) -> None:
    """A second Slurm job under a pool job's name (an sbatch whose answer was lost, that Slurm
    made anyway after the pool submitted again) is cancelled at the next poll: one pool job
    never has two live Slurm jobs. Another store's jobs are left alone."""
    job = _submit(service, "nlp", ["sleep", "300"])
    service.settle()
    tracked = service.executor.slurm_ids[job["id"]]  # type: ignore[attr-defined]
    store_id = service.store.meta("store_id")
    stray_name = f"{INTENT}{store_id}-{job['id']}-0ld5ubm1"
    foreign_name = f"{INTENT}0therst0-{job['id']}-0ld5ubm1"
    submitted = [
        commands.run(
            "sbatch", "--parsable", "--output=/dev/null", f"--job-name={n}", "--wrap", "sleep 300"
        ).strip()
        for n in (stray_name, foreign_name)
    ]
    try:
        _until(lambda: not _live(stray_name), "the stray is cancelled", service)
        assert _live(foreign_name), "another store's job was cancelled"
        assert commands.job_state(tracked)[0] in ("RUNNING", "PENDING")
        assert service.job(OPERATOR_WHO, job["id"])["state"] == "running"
    finally:
        for slurm_id in submitted:
            commands.cancel(slurm_id.split(";")[0])


def test_a_command_starting_with_a_dash_is_the_program_not_an_option_of_srun(
    service: PoolService, tmp_path: Path
) -> None:
    """``["--uid=0", "id"]`` once made srun run ``id`` as root: now srun is told where its
    options end, and the job fails (no program ``--uid=0``)."""
    job = _submit(service, "nlp", ["--uid=0", "id"])
    _until(lambda: service.job(OPERATOR_WHO, job["id"])["state"] == "failed", "it fails", service)
    script = (tmp_path / f"job-{job['id']}.sbatch").read_text()
    assert "srun -- --uid=0 id" in script
    home = Path(os.path.expanduser(f"~{service.view.quotas['nlp']['run_as']}"))
    out = home / f"xirang-pool-{service.store.meta('store_id')}-{job['id']}.out"
    assert "uid=0(root)" not in out.read_text()


def test_a_finished_job_keeps_when_it_started(service: PoolService) -> None:
    job = _submit(service, "nlp", ["true"])
    _until(lambda: service.job(OPERATOR_WHO, job["id"])["state"] == "done", "it ends", service)
    row = service.job(OPERATOR_WHO, job["id"])
    assert row["started"] is not None and row["started"] <= row["finished"]
