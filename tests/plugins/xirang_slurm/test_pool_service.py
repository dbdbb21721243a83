"""``xirang pool serve --executor slurm`` against the real single-node Slurm: the pool's jobs
survive a kill -9 of the service (the Slurm job ids are in its store)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xirang_slurm import commands
from xirang_slurm.executor import SlurmExecutor

from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError

OPERATOR = "operator-secret-for-slurm-tests"


class Pool:
    """``xirang pool serve --executor slurm`` in its own process, on one port across restarts."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.store = folder / "pool.db"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR,
            "XIRANG_HOME": str(self.folder),
        }
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--executor", "slurm"]
        command += ["--store", str(self.store), "--port", str(self.port)]
        log = (self.folder / "serve.log").open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.operator.call("GET", "/v1/status")
                return
            except PoolError:
                assert self.process.poll() is None, (self.folder / "serve.log").read_text()
                time.sleep(0.2)
        raise AssertionError("xirang pool serve did not serve within 120 s")

    @property
    def operator(self) -> PoolClient:
        return PoolClient(self.url, OPERATOR, timeout=10)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def handles(self) -> dict[int, str]:
        with sqlite3.connect(self.store) as db:
            return dict(db.execute("SELECT job_id, handle FROM handles").fetchall())

    def wait_state(self, job_id: int, states: set[str], timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.operator.job(job_id)["state"]
            if state in states:
                return state
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not reach {states} in {timeout:.0f} s")


@pytest.fixture
def pool(slurm: str, tmp_path: Path) -> Iterator[Pool]:
    served = Pool(tmp_path)
    served.start()
    try:
        yield served
    finally:
        if served.process and served.process.poll() is None:
            served.kill()
        for slurm_id in served.handles().values():
            commands.cancel(slurm_id)


def test_jobs_running_when_the_pool_is_killed_end_as_slurm_ended_them(pool: Pool) -> None:
    pool.operator.call("PUT", "/v1/projects/nlp", {})
    marker = pool.folder / "ok"
    ok = pool.operator.submit(
        project="nlp", cards=1, payload={"command": ["bash", "-c", f"sleep 4; echo ok > {marker}"]}
    )
    bad = pool.operator.submit(
        project="nlp", cards=1, payload={"command": ["bash", "-c", "sleep 4; exit 3"]}
    )
    deadline = time.monotonic() + 60
    while len(pool.handles()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    handles = pool.handles()
    assert set(handles) == {ok["id"], bad["id"]}, "sbatch's job ids are stored"
    pool.kill()
    deadline = time.monotonic() + 120
    for slurm_id in handles.values():  # both end while no pool is there to poll them
        while commands.job_state(slurm_id)[0] not in ("COMPLETED", "FAILED"):
            assert time.monotonic() < deadline, f"Slurm job {slurm_id} did not end"
            time.sleep(0.5)
    pool.start()
    assert pool.wait_state(ok["id"], {"done", "failed"}) == "done"
    assert pool.wait_state(bad["id"], {"done", "failed"}) == "failed"
    assert marker.read_text().strip() == "ok"
    free = pool.operator.call("GET", "/v1/status")["types"]["cpu"]
    assert free["free"] == free["capacity"], "the ended jobs' devices are free again"


def test_an_adopted_job_slurm_does_not_know_or_without_an_id_is_failed(
    slurm: str, tmp_path: Path
) -> None:
    """A stored id Slurm never issued or has purged, and a running job whose id was never
    stored (the pool died between sbatch and the write), are reported failed, not polled
    forever; Slurm's own ids of live jobs are polled as before."""
    executor = SlurmExecutor(tmp_path)
    executor.adopt({5: "999999999", 6: None})
    assert sorted(executor.poll()) == [(5, False), (6, False)]
    assert executor.poll() == []
