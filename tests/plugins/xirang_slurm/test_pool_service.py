"""``xirang pool serve --executor slurm`` against the real single-node Slurm: the pool's jobs
survive a kill -9 of the service (the Slurm job ids are in its store), and run as their
project's account (a Unix user each test makes and removes), which cannot read the service's
store or operator token."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from xirang_slurm import commands
from xirang_slurm.executor import SlurmExecutor

from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

OPERATOR = "operator-secret-for-slurm-tests"


class Pool:
    """``xirang pool serve --executor slurm`` in its own process, on one port across restarts."""

    def __init__(self, folder: Path, token_env: bool = True) -> None:
        self.folder, self.token_env = folder, token_env
        self.store = folder / "pool.db"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "XIRANG_HOME": str(self.folder)}
        env.pop("XIRANG_POOL_OPERATOR_TOKEN", None)
        if self.token_env:
            env["XIRANG_POOL_OPERATOR_TOKEN"] = OPERATOR
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--executor", "slurm"]
        command += ["--store", str(self.store), "--port", str(self.port)]
        log = (self.folder / "serve.log").open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.operator.call("GET", "/v1/status")
                return
            except (PoolError, OSError):  # not serving yet, or its token file not written
                assert self.process.poll() is None, (self.folder / "serve.log").read_text()
                time.sleep(0.2)
        raise AssertionError("xirang pool serve did not serve within 120 s")

    @property
    def token_file(self) -> Path:
        return Path(f"{self.store}.operator-token")

    @property
    def operator(self) -> PoolClient:
        token = OPERATOR if self.token_env else self.token_file.read_text().strip()
        return PoolClient(self.url, token, timeout=10)

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
def account() -> Iterator[str]:
    """A Unix user of this machine (the single-node Slurm's too), removed afterwards."""
    name = f"xrpool-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True)


@contextmanager
def _served(folder: Path, token_env: bool = True) -> Iterator[Pool]:
    served = Pool(folder, token_env)
    served.start()
    try:
        yield served
    finally:
        if served.process and served.process.poll() is None:
            served.kill()
        for slurm_id in served.handles().values():
            commands.cancel(slurm_id)


@pytest.fixture
def pool(slurm: str, tmp_path: Path) -> Iterator[Pool]:
    with _served(tmp_path) as served:
        yield served


def test_jobs_running_when_the_pool_is_killed_end_as_slurm_ended_them(
    pool: Pool, account: str
) -> None:
    pool.operator.call("PUT", "/v1/projects/nlp", {"run_as": account})
    marker = Path(pwd.getpwnam(account).pw_dir) / "ok"
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


def test_jobs_run_as_their_projects_account_which_cannot_read_the_pools_secrets(
    slurm: str, account: str
) -> None:
    """The Slurm job's owner is the project's ``run_as``; the job cannot read the operator
    token file or the store (mode 0600), and none of the service's environment reaches it.
    A project without an account cannot submit, and the service's own user is refused."""
    folder = Path(tempfile.mkdtemp(prefix="xirang-pool-"))
    folder.chmod(0o755)  # the account may look in: only the files' own modes keep it out
    try:
        with _served(folder, token_env=False) as pool:
            _run_as_account(pool, folder, account)
    finally:
        shutil.rmtree(folder)


def _run_as_account(pool: Pool, folder: Path, account: str) -> None:
    """The checks of the test above, on a pool whose folder ``folder`` others may enter."""
    home = Path(pwd.getpwnam(account).pw_dir)
    pool.operator.call("PUT", "/v1/projects/nlp", {})
    with pytest.raises(PoolError, match=r"project 'nlp' has no account.*--run-as") as err:
        pool.operator.submit(project="nlp", cards=1, payload={"command": ["true"]})
    assert err.value.status == 403
    with pytest.raises(PoolError, match="the pool service's own user"):
        pool.operator.call("PUT", "/v1/projects/nlp", {"run_as": "root"})
    pool.operator.call("PUT", "/v1/projects/nlp", {"run_as": account})
    probe = (
        f"id -un > {home}/who; env > {home}/env; "
        f"for f in {pool.token_file} {pool.store} {folder}/serve.log; do "
        "cat $f > /dev/null 2>&1 && echo $f; "
        f"done > {home}/read; sleep 5"
    )
    job = pool.operator.submit(project="nlp", cards=1, payload={"command": ["bash", "-c", probe]})
    # the store holds the job's intent (the name it is submitted under) until sbatch answers,
    # then its Slurm id: on a busy host the test read the intent (two CI runs)
    deadline = time.monotonic() + 60
    while not pool.handles().get(job["id"], "").isdigit() and time.monotonic() < deadline:
        time.sleep(0.2)
    slurm_id = pool.handles()[job["id"]]
    # scontrol, not squeue: squeue lists no job that has ended
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", slurm_id], capture_output=True, text=True
    ).stdout
    assert f" UserId={account}(" in f" {shown}", shown
    assert pool.wait_state(job["id"], {"done", "failed"}) == "done"
    assert (home / "who").read_text().strip() == account
    readable = (home / "read").read_text().split()
    assert readable == [f"{folder}/serve.log"], "the job read the pool's secrets"
    assert "XIRANG" not in (home / "env").read_text()
    with sqlite3.connect(pool.store) as db:  # ids start again per store: its id is in the name
        (store_id,) = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    assert (home / f"xirang-pool-{store_id}-{job['id']}.out").exists()
    for secret in (pool.token_file, pool.store):
        assert secret.stat().st_mode & 0o777 == 0o600, secret


def test_a_job_sbatch_refuses_fails_and_the_service_serves_on(
    slurm: str, tmp_path: Path, account: str
) -> None:
    """A placement Slurm refuses (a node it does not have) ends the job ``failed`` at the next
    tick instead of stopping the service; the next job runs."""
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": "no-such-node", "type": "cpu", "devices": 1}]
    projects = [{"name": "nlp", "guaranteed": 1, "run_as": account}]
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    store = PoolStore(tmp_path / "pool.db")
    service = PoolService(store, cluster, "priority", OPERATOR, SlurmExecutor(tmp_path / "s"))
    try:
        job = service.submit(
            OPERATOR_WHO, {"project": "nlp", "cards": 1, "payload": {"command": ["true"]}}
        )
        assert job["state"] == "submitting"  # placed; Slurm has not answered yet
        service.settle()
        service.tick()
        assert service.job(OPERATOR_WHO, job["id"])["state"] == "failed"
        assert service.status(OPERATOR_WHO)["types"]["cpu"]["free"] == 1
    finally:
        service.close()
