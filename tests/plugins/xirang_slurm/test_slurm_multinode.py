"""Multi-node runs on a real 2-node Slurm (.ci/services/slurm_multinode.sh: one slurmd per
network namespace, each node with its own address on a bridge), through ``scheduler=slurm`` and
through the pool service's Slurm executor.

The same tiny run everywhere; a 1-node 2-worker run of the local launcher is the reference
that the 2-node runs must equal (losses at every step, and the final weights), whether they ran
straight through, were stopped by ``scancel --signal=TERM`` or by Slurm's warning before a time
limit and requeued, lost a node, or were preempted by the pool and placed again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import yaml
from xirang_ckpt.export import model_tensors
from xirang_slurm import inventory
from xirang_slurm.commands import parse_records
from xirang_slurm.executor import SlurmExecutor

from tests.conftest import run_dirs
from tests.plugins.xirang_slurm.conftest import MultiNodeSlurm
from xirang_core.checkpoint.events import read_events
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.devices.cgroup import CPU_CGROUP
from xirang_service.pool.client import PoolClient
from xirang_service.pool.rest import serve
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore

STEPS = 6
#: the default model (steps long enough that a stop sent after step 1 comes before the last),
#: a checkpoint every step (a stop or a lost node never throws a step away)
RUN = (
    "tokenizer=bytes",
    "trainer.threads=1",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    f"trainer.max_steps={STEPS}",
    "checkpoint=every_steps",
    "checkpoint.interval=1",
    "checkpoint.resume=never",
)
TWO_NODES = ("scheduler=slurm", "scheduler.nodes=2", "trainer.nproc=1", *RUN)
DDP = "parallel=ddp"


def xirang(
    root: Path, *args: str, env: dict[str, str] | None = None, user: str = ""
) -> subprocess.Popen:
    """``python -m xirang ARGS`` in ``root``, its runs under ``root/runs``; as ``user`` when
    given (a pool job runs as its project's account, which must own its run folder)."""
    root.mkdir(parents=True, exist_ok=True)
    env = {"XIRANG_RUNS": str(root / "runs"), "OMP_NUM_THREADS": "1", **(env or {})}
    as_user = ["runuser", "-u", user, "--"] if user else []
    return subprocess.Popen(
        [*as_user, sys.executable, "-m", "xirang", *args],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(proc: subprocess.Popen, root: Path, timeout: float = 300) -> Path:
    """The run directory of a run that ended well."""
    out, _ = proc.communicate(timeout=timeout)
    (run_dir,) = run_dirs(root / "runs")
    jobs = "".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert proc.returncode == 0, out[-3000:] + jobs[-3000:]
    return run_dir


def losses(run_dir: Path) -> dict[int, float]:
    """Each step's loss, as the run's last segment to train that step logged it."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def segments_of(run_dir: Path) -> list[dict]:
    return [json.loads(s) for s in (run_dir / "segments.jsonl").read_text().splitlines()]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    store = CheckpointStore.at(str(run_dir / "checkpoints"))
    newest = next(c for c in store.candidates() if c.manifest is not None)
    return model_tensors(store, newest.manifest)


def assert_same_run(run_dir: Path, reference: Path, unlogged: int = 0) -> None:
    """Same losses at every step (a stop at a step's end leaves that one step unlogged) and
    the same final weights."""
    got, want = losses(run_dir), losses(reference)
    assert len(got) >= STEPS - unlogged and got.keys() <= want.keys(), got
    assert all(abs(got[s] - want[s]) <= 1e-6 for s in got), (got, want)
    ours, theirs = final_weights(run_dir), final_weights(reference)
    assert ours.keys() == theirs.keys()
    assert all(torch.allclose(ours[k], theirs[k], rtol=0, atol=1e-6) for k in ours)


def wait_for_step(run_dir_root: Path, step: int, timeout: float = 240) -> Path:
    """The run directory once its run has saved a checkpoint at ``step`` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run_dir in run_dirs(run_dir_root / "runs"):
            events = run_dir / "checkpoint_events.jsonl"
            saves = [
                json.loads(e) for e in (events.read_text().splitlines() if events.exists() else [])
            ]
            if any(e.get("event") == "save" and e["step"] >= step for e in saves):
                return run_dir
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step {step} in time")


def slurm_job(cluster: MultiNodeSlurm) -> str:
    """The one xirang job running on the cluster."""
    out = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i %j")
    (job,) = [line.split()[0] for line in out.splitlines() if " xirang-" in line]
    return job


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The same run on one node with two workers (the local launcher, no Slurm), once per
    ``parallel=...`` choice."""
    done: dict[str, Path] = {}

    def run(strategy: str) -> Path:
        if strategy not in done:
            root = tmp_path_factory.mktemp("one-node")
            done[strategy] = finished(xirang(root, "trainer.nproc=2", strategy, *RUN), root)
        return done[strategy]

    return run


@pytest.fixture
def reference(one_node: Callable[[str], Path]) -> Path:
    return one_node(DDP)


@pytest.mark.service
@pytest.mark.slow
@pytest.mark.parametrize("strategy", [DDP, "parallel=fsdp"])
def test_two_nodes_train_as_one_node_with_two_workers(
    slurm_multinode: MultiNodeSlurm, one_node: Callable[[str], Path], strategy: str, tmp_path: Path
) -> None:
    run_dir = finished(xirang(tmp_path, *TWO_NODES, strategy, env=slurm_multinode.env), tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == STEPS
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    (out,) = run_dir.glob("slurm-*.out")
    job = slurm_multinode.run("scontrol", "-o", "show", "job", out.stem.removeprefix("slurm-"))
    assert f"NodeList={slurm_multinode.hostlist} " in job  # two nodes, two addresses
    assert_same_run(run_dir, one_node(strategy))


@pytest.mark.service
@pytest.mark.slow
def test_two_nodes_one_under_a_cpu_quota_train_balanced(
    slurm_multinode: MultiNodeSlurm, tmp_path: Path
) -> None:
    """Issue #37's Slurm test bed: node2 a slower machine for real (a quarter of a core for its
    slurmd and the steps it starts); ``parallel.balance=adaptive`` measures it and moves the
    step's micro-batches to node1's rank."""
    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip(f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)")
    balanced = (
        DDP,
        "parallel.balance=adaptive",
        "parallel.balance_every=1",
        "parallel.balance_shares=[4,4]",
        "trainer.global_batch=8",
        "trainer.micro_batch=1",
    )
    with slurm_multinode.under_quota("node2", 0.25):
        run = xirang(tmp_path, *TWO_NODES, *balanced, env=slurm_multinode.env)
        run_dir = finished(run, tmp_path, timeout=600)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shares = [r["balance_shares"] for r in rows if "balance_shares" in r]
    assert shares[-1][0] > shares[-1][1], shares  # from 4:4 toward rank 0, on node1
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2


@pytest.mark.service
@pytest.mark.slow
def test_a_straggler_under_the_pools_slurm_executor_reaches_the_pool(
    pool, slurm_multinode: MultiNodeSlurm, tmp_path: Path, account: str
) -> None:
    """``scheduler=pool`` with the Slurm executor: node2 under a quarter of a core from the
    start, its rank far below the even shares the run began with; the submitter, following
    the job, reads the run's straggler event from the shared run directory and passes it on,
    so the job's history in the pool records it (the pool reports, it does not drain)."""
    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip(f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)")
    service, operator, _ = pool
    token = operator.call("PUT", "/v1/projects/prod", {})["token"]
    home = tmp_path / "account-home"  # the submitter is the account its jobs run as
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    env = {"XIRANG_POOL_URL": operator.url, "XIRANG_POOL_TOKEN": token, "XIRANG_HOME": str(home)}
    pool_run = ("scheduler=pool", "project=prod", "pool.cards=2", "scheduler.poll_s=0.3")
    balanced = ("parallel.balance=adaptive", "parallel.balance_every=1")
    shares = ("parallel.balance_shares=[4,4]", "trainer.global_batch=8", "trainer.micro_batch=1")
    with slurm_multinode.under_quota("node2", 0.25):
        run = ("trainer.nproc=2", DDP, *RUN, *balanced, *shares)
        proc = xirang(tmp_path, *pool_run, *run, env=env, user=account)
        run_dir = finished(proc, tmp_path, timeout=600)
    (event,) = [e for e in read_events(run_dir) if e["event"] == "straggler"]
    assert event["rank"] == 1
    told = [e for e in service.job_history(OPERATOR, 1)["events"] if e["event"] == "straggler"]
    assert len(told) == 1 and told[0]["text"].startswith("straggler reported: rank 1 at "), told


def assert_stopped_requeued_and_resumed(run_dir: Path, reference: Path) -> None:
    """One stop at a step's end, one requeue, resumed after that step, and the weights of the
    run that was never stopped."""
    output = "".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert output.count("requeueing job") == 1 and "stopped on request at step" in output
    starts = [s["start_step"] for s in segments_of(run_dir) if "start_step" in s]
    assert len(starts) == 2 and starts[1] > 1, starts  # resumed after the step it stopped at
    assert_same_run(run_dir, reference, unlogged=1)


def workers_of(run_dir: Path) -> list[int]:
    """The run's worker processes (``python -m xirang_slurm.task RUN_DIR``, not the srun that
    started them): the nodes share this machine's process table."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # not a process, or it ended meanwhile
            continue
        if argv[1:4] == [b"-m", b"xirang_slurm.task", str(run_dir).encode()]:
            found.append(int(proc.name))
    return found


def term_reached(pid: int) -> bool:
    """SIGTERM is pending on the (stopped) process ``pid``, or it runs again (went on to it)."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    pending = int(status["ShdPnd"], 16) | int(status["SigPnd"], 16)
    return bool(pending & 1 << (signal.SIGTERM - 1)) or not status["State"].strip().startswith("T")


def seconds(slurm_time: str) -> int:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) as seconds."""
    days, _, clock = slurm_time.rpartition("-")
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total + int(days or 0) * 86400


@pytest.mark.service
@pytest.mark.slow
def test_the_warning_before_a_time_limit_checkpoints_requeues_and_resumes(
    slurm_multinode: MultiNodeSlurm, reference: Path, tmp_path: Path
) -> None:
    """A real time limit: set on the running job, it makes slurmctld send ``--signal``'s TERM
    (at its next periodic check, up to 30 s later); the run checkpoints at the step's end, the
    batch script requeues it and it resumes. The workers are held (SIGSTOP) from the moment the
    limit is set until the warning is pending on them, so the run cannot end before it comes.
    ``scancel --signal=TERM`` (a preempting scheduler's stop) follows at once, as the repeat
    Slurm may deliver: the same stop path, which must not stop the run twice."""
    grace = 120  # --signal=TERM@120: the warning is due as soon as the limit is this close
    proc = xirang(
        tmp_path, *TWO_NODES, DDP, f"scheduler.signal_grace_s={grace}", env=slurm_multinode.env
    )
    run_dir = wait_for_step(tmp_path, 1)
    job = slurm_job(slurm_multinode)
    (workers := workers_of(run_dir)).sort()
    assert len(workers) == 2, workers  # one on each node
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        (record,) = parse_records(slurm_multinode.run("scontrol", "-o", "show", "job", job))
        # a limit 40..100 s ahead: inside the warning's grace, far enough that it is not reached
        minutes = (seconds(record["RunTime"]) + 40) // 60 + 1
        slurm_multinode.run("scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}")
        deadline = time.monotonic() + 60
        while not all(term_reached(pid) for pid in workers):
            assert time.monotonic() < deadline, "slurmctld sent no warning before the time limit"
            time.sleep(0.2)
        # the warning came; lift the limit so the requeued job is not warned again at once
        slurm_multinode.run("scontrol", "update", f"JobId={job}", "TimeLimit=UNLIMITED")
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
    # a repeat, as Slurm's may be (the job may have been requeued already: no check)
    slurm_multinode.run("scancel", "--signal=TERM", job, check=False)
    assert_stopped_requeued_and_resumed(finished(proc, tmp_path), reference)


@pytest.mark.service
@pytest.mark.slow
def test_a_lost_node_resumes_from_the_last_checkpoint(
    slurm_multinode: MultiNodeSlurm, reference: Path, tmp_path: Path
) -> None:
    proc = xirang(tmp_path, *TWO_NODES, DDP, "trainer.max_restarts=1", env=slurm_multinode.env)
    wait_for_step(tmp_path, 1)
    lost = slurm_multinode.nodes[-1]  # not the batch script's node
    pids = subprocess.run(
        ["ip", "netns", "pids", slurm_multinode.namespace(lost)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert pids, f"nothing runs on {lost}"
    for pid in pids:  # its slurmd, slurmstepd and worker: the node is gone
        os.kill(int(pid), signal.SIGKILL)
    slurm_multinode.wait_down(lost)  # Slurm finds it gone (SlurmdTimeout): it requeues the job
    slurm_multinode.restore()  # a replacement node comes up under the same name
    run_dir = finished(proc, tmp_path)
    starts = [s["start_step"] for s in segments_of(run_dir) if "start_step" in s]
    assert len(starts) >= 2 and starts[1] > 1, starts  # from a checkpoint, not from step 1
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == STEPS
    assert_same_run(run_dir, reference)


def tick_until(service: PoolService, stop: threading.Event) -> None:
    """What ``xirang pool serve`` does every 2 s: the executor's ends, then scheduling."""
    while not stop.wait(0.3):
        service.tick()


@contextlib.contextmanager
def traversable(*paths: str | Path) -> Iterator[None]:
    """Every folder above ``paths`` that others cannot pass through (a private ``/root``
    holding the interpreter, pytest's 0700 temporary folders) made passable (``o+x``: no
    listing, no reading), and put back as it was afterwards."""
    changed: dict[Path, int] = {}
    for path in paths:
        for folder in Path(path).resolve().parents:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if folder not in changed and not mode & stat.S_IXOTH:
                changed[folder] = mode
                folder.chmod(mode | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(mode)


@pytest.fixture
def account(tmp_path: Path) -> Iterator[str]:
    """The Unix account the pool runs the projects' jobs as (it never runs them as itself),
    made for the test and removed after; its workers need the interpreter and the run folder."""
    name = f"xrpool-{os.getpid()}"
    subprocess.run(["useradd", "--create-home", name], check=True)
    try:
        tmp_path.chmod(0o1777)
        with traversable(tmp_path / "probe", os.path.realpath(sys.executable)):
            probe = subprocess.run(
                [
                    "runuser",
                    "-u",
                    name,
                    "--",
                    sys.executable,
                    "-c",
                    f"open('{tmp_path}/probe', 'w')",
                ],
                capture_output=True,
                text=True,
            )
            assert probe.returncode == 0, f"{name} cannot run {sys.executable}: {probe.stderr}"
            yield name
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture
def pool(
    slurm_multinode: MultiNodeSlurm,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    account: str,
):
    """The pool service with the Slurm executor over the two nodes (one device of each, so a
    2-card job spans both), ticking as ``xirang pool serve`` does, only faster. Project
    ``batch`` has no guarantee (its jobs borrow); ``prod`` is guaranteed both cards; both run
    their jobs as ``account``."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_multinode.conf))
    cluster = tmp_path / "cluster.yaml"
    nodes = [{**node, "devices": 1} for node in inventory.nodes()]
    projects = [  # one account for both, on purpose
        {"name": "batch", "guaranteed": 0, "run_as": account, "shared_account": True},
        {"name": "prod", "guaranteed": 2, "run_as": account, "shared_account": True},
    ]
    cluster.write_text(yaml.safe_dump({"nodes": nodes, "projects": projects}))
    executor = SlurmExecutor(tmp_path / "slurm")
    service = PoolService(PoolStore(tmp_path / "pool.db"), cluster, "priority", "op", executor)
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()
    ticks = threading.Thread(target=tick_until, args=(service, stop))
    ticks.start()
    yield service, PoolClient(f"http://127.0.0.1:{server.server_address[1]}", "op"), executor
    stop.set()
    ticks.join()
    server.shutdown()
    service.close()


@pytest.mark.service
@pytest.mark.slow
def test_the_pool_places_a_two_node_job_preempts_it_and_it_resumes(
    pool, reference: Path, tmp_path: Path, account: str
) -> None:
    """``scheduler=pool`` with the service's Slurm executor: the borrowed 2-card job runs on
    both nodes (``--nodelist``); ``prod``'s high-priority job takes the cards back, so the run
    is sent TERM (it checkpoints at the step's end) and cancelled; once that job ends, the pool
    places the run again and it resumes to the weights of a run never stopped."""
    service, operator, executor = pool
    token = operator.call("PUT", "/v1/projects/batch", {})["token"]
    operator.call("PUT", "/v1/projects/prod", {})
    home = tmp_path / "account-home"  # the submitter is the account its jobs run as
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    env = {"XIRANG_POOL_URL": operator.url, "XIRANG_POOL_TOKEN": token, "XIRANG_HOME": str(home)}
    pool_run = ("scheduler=pool", "project=batch", "pool.cards=2", "scheduler.poll_s=0.3")
    run = ("trainer.nproc=2", DDP, *RUN, "checkpoint.resume=auto")
    proc = xirang(tmp_path, *pool_run, *run, env=env, user=account)
    run_dir = wait_for_step(tmp_path, 1)
    urgent = operator.submit(
        project="prod", cards=2, priority="high", payload={"command": ["true"]}
    )
    # placed: it took both cards back from the borrowed run (Slurm has yet to confirm it)
    assert urgent["state"] in ("submitting", "running")
    finished(proc, tmp_path)
    script = (executor.workdir / "job-1.sbatch").read_text()
    assert "#SBATCH --nodelist=node1,node2" in script and "#SBATCH --ntasks-per-node=1" in script
    job = service.job(OPERATOR, 1)
    assert (job["state"], job["preemptions"]) == ("done", 1)
    assert service.job(OPERATOR, urgent["id"])["state"] == "done"
    restores = [
        json.loads(e) for e in (run_dir / "checkpoint_events.jsonl").read_text().splitlines()
    ]
    (restore,) = [e for e in restores if e["event"] == "restore"]
    assert restore["world_size"] == 2 and 1 <= restore["step"] < STEPS
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2
    assert_same_run(run_dir, reference, unlogged=1)
