"""pool_chaos.py's Slurm phase, on the real single-node Slurm test bed (.ci/services/slurm.sh),
bounded in time: ``xirang pool serve --executor slurm`` (an SQLite store) over the node, which
the cluster file gives more cards than Slurm has CPUs, so Slurm holds the pool's later jobs
pending; two projects, each running as an account this phase makes and removes.

1. idle: tenant ``b`` submits and cancels one job at a time for ``seconds``: its submit p99;
2. stall: slurmctld stopped (SIGSTOP; SIGCONT however the phase ends) for ``stall_s`` while
   tenant ``a`` submits a job a second and ``b`` probes as in 1: ``b``'s submit p99 over the
   idle one is ``slurm_stall_p99_ratio``;
3. once slurmctld is back and the pool has settled, every Slurm job of the pool's store is
   read from ``scontrol show job``: ``double_runs`` = pool jobs with more than one Slurm job
   that started, ``ghost_runs`` = Slurm jobs that started after their pool job ended;
4. ``cancels`` times: ``b`` submits a job Slurm holds pending (the node's CPUs are taken by
   ``a``'s jobs) and cancels it with DELETE: ``cancel_pending_p99_ms``, and
   ``cancel_pending_left`` counts those Slurm did not end ``CANCELLED``.

    python benchmarks/pool_chaos_slurm.py [--seconds 6] [--stall-s 20] [--cancels 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xirang_slurm import commands

from tests.pool.accounts import login_accounts
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError

OPERATOR = "chaos-slurm-operator"
#: the single-node cluster's slurmctld (.ci/services/slurm.sh's SlurmctldPidFile)
CONTROLLER_PID = Path("/run/slurmctld.pid")
#: a pool job's command: long enough to hold its CPU through every phase
HOLD = ["sleep", "600"]


def p99(ms: list[float]) -> float:
    ms = sorted(ms)
    return ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")


def why_not() -> str:
    """Why this machine cannot run the phase ('' when it can)."""
    if shutil.which("sbatch") is None:
        return "Slurm is not installed (.ci/services/slurm.sh)"
    if os.geteuid() != 0:
        return "the Slurm executor submits as the projects' accounts: run as root"
    if not CONTROLLER_PID.exists():
        return f"no slurmctld pid file at {CONTROLLER_PID}"
    probe = subprocess.run(["sinfo", "-h", "-o", "%n"], capture_output=True, text=True)
    return "" if probe.returncode == 0 and probe.stdout.strip() else "slurmctld does not answer"


@contextlib.contextmanager
def served(folder: Path, cluster: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "XIRANG_HOME": str(folder), "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR}
    command = [sys.executable, "-m", "xirang", "pool", "serve", "--executor", "slurm"]
    command += ["--store", str(folder / "pool.db"), "--cluster", str(cluster), "--port", str(port)]
    log = (folder / "serve.log").open("ab")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                PoolClient(url, OPERATOR, timeout=5).call("GET", "/v1/status")
                break
            except (PoolError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"xirang pool serve did not serve: see {log.name}") from None
                time.sleep(0.2)
        yield url, process
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def stalled(seconds: float) -> Iterator[None]:
    """slurmctld stopped; resumed after ``seconds`` at most, and on leaving, whatever happens."""
    pid = int(CONTROLLER_PID.read_text())
    timer = threading.Timer(seconds, os.kill, (pid, signal.SIGCONT))
    os.kill(pid, signal.SIGSTOP)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        os.kill(pid, signal.SIGCONT)


def probe(pool: PoolClient, seconds: float) -> list[float]:
    """Submit and cancel one job at a time for ``seconds``; each submit's time in ms."""
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        job = pool.submit(cards=1, name="probe", payload={"command": HOLD})
        times.append((time.monotonic() - started) * 1000)
        pool.cancel(job["id"])
    return times


def slurm_jobs(prefix: str) -> list[dict[str, str]]:
    """Every job slurmctld holds whose name starts with ``prefix``."""
    return [r for r in commands.jobs().values() if r.get("JobName", "").startswith(prefix)]


def _epoch(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def runs(operator: PoolClient, prefix: str) -> tuple[int, int]:
    """(double_runs, ghost_runs) of the pool's store, from Slurm's own records."""
    started: dict[int, list[float]] = {}
    for record in slurm_jobs(prefix):
        start = _epoch(record.get("StartTime", ""))
        ran = record.get("RunTime", "00:00:00") != "00:00:00" or record["JobState"] == "RUNNING"
        if start is not None and ran:
            job_id = int(record["JobName"].removeprefix(prefix).split("-")[0])
            started.setdefault(job_id, []).append(start)
    doubles = sum(len(starts) > 1 for starts in started.values())
    ghosts = 0
    for job_id, starts in started.items():
        finished = operator.job(job_id)["finished"]
        ghosts += sum(finished is not None and start > finished + 1 for start in starts)
    return doubles, ghosts


def jobs(operator: PoolClient) -> list[dict]:
    return operator.call("GET", "/v1/jobs")


def settle(operator: PoolClient, timeout: float = 120) -> None:
    """Until no job of the pool says ``submitting`` or ``unknown``."""
    deadline = time.monotonic() + timeout
    while any(j["state"] in ("submitting", "unknown") for j in jobs(operator)):
        if time.monotonic() > deadline:
            raise SystemExit("the pool did not settle after slurmctld came back")
        time.sleep(0.5)


def pending_cancels(pool: PoolClient, prefix: str, count: int) -> tuple[list[float], int]:
    """``count`` jobs Slurm holds pending, each cancelled by DELETE: the cancels' times (ms),
    and how many of their Slurm jobs did not end CANCELLED."""
    times, left = [], 0
    for _ in range(count):
        job = pool.submit(cards=1, name="pending", payload={"command": HOLD})
        name = ""
        deadline = time.monotonic() + 60
        while not name:
            mine = f"{prefix}{job['id']}-"
            found = [r for r in slurm_jobs(mine) if r["JobState"] == "PENDING"]
            name = found[0]["JobId"] if found else ""
            if time.monotonic() > deadline:
                raise SystemExit(f"pool job {job['id']} never pended in Slurm")
            time.sleep(0.1)
        started = time.monotonic()
        pool.cancel(job["id"])
        times.append((time.monotonic() - started) * 1000)
        deadline = time.monotonic() + 30
        while commands.job_state(name)[0] not in ("CANCELLED", "UNKNOWN"):
            if time.monotonic() > deadline:
                left += 1
                break
            time.sleep(0.1)
    return times, left


def phase(seconds: float = 6.0, stall_s: float = 20.0, cancels: int = 10) -> dict[str, str]:
    """The phase's figures, by name (each ``nan`` with a ``slurm_phase`` reason when this
    machine cannot run it)."""
    reason = why_not() if stall_s > 0 else "--stall-s 0"
    names = ("slurm_stall_p99_ratio", "double_runs", "ghost_runs", "cancel_pending_p99_ms")
    if reason:
        return {"slurm_phase": f"skipped({reason})", **dict.fromkeys(names, "nan")}
    folder = Path(tempfile.mkdtemp(prefix="xirang-chaos-slurm-"))
    node = subprocess.run(["sinfo", "-h", "-o", "%n"], capture_output=True, text=True)
    with login_accounts("xrchaos", "xrchaos") as (first, second):
        projects = [
            {"name": "a", "guaranteed": 3, "borrow_limit": 0, "run_as": first},
            {"name": "b", "guaranteed": 5, "run_as": second},
        ]
        nodes = [{"name": node.stdout.split()[0], "type": "cpu", "devices": 8}]
        cluster = folder / "cluster.json"
        cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
        with served(folder, cluster) as (url, _):
            return _measure(url, folder, seconds, stall_s, cancels)


def _measure(url: str, folder: Path, seconds: float, stall_s: float, cancels: int) -> dict:
    operator = PoolClient(url, OPERATOR, timeout=120)
    put = {"rotate_token": True}
    tokens = {p: operator.call("PUT", f"/v1/projects/{p}", put)["token"] for p in ("a", "b")}
    a, b = (PoolClient(url, tokens[p], timeout=120) for p in ("a", "b"))
    with sqlite3.connect(folder / "pool.db") as db:
        (store_id,) = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    prefix = f"xirang-{store_id}-"
    idle = probe(b, seconds)
    stop = threading.Event()

    def tenant_a() -> None:
        while not stop.is_set():
            a.submit(cards=1, name="stalled", payload={"command": HOLD})
            stop.wait(1.0)

    with stalled(stall_s):
        thread = threading.Thread(target=tenant_a)
        thread.start()
        during = probe(b, max(1.0, stall_s - 2))
        stop.set()
        thread.join()
    settle(operator)
    doubles, ghosts = runs(operator, prefix)
    cancel_ms, left = pending_cancels(b, prefix, cancels)
    for job in jobs(operator):
        if job["state"] not in ("done", "failed", "cancelled"):
            operator.cancel(job["id"])
    settle(operator)
    return {
        "slurm_idle_submit_p99_ms": f"{p99(idle):.1f}",
        "slurm_stall_submit_p99_ms": f"{p99(during):.1f}",
        "cancel_pending_left": str(left),
        "slurm_stall_p99_ratio": f"{p99(during) / p99(idle):.2f}",
        "double_runs": str(doubles),
        "ghost_runs": str(ghosts),
        "cancel_pending_p99_ms": f"{p99(cancel_ms):.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--stall-s", type=float, default=20.0)
    parser.add_argument("--cancels", type=int, default=10)
    args = parser.parse_args()
    figures = phase(args.seconds, args.stall_s, args.cancels)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
