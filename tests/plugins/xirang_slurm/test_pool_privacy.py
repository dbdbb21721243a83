"""Tenants' files are private by default: a pool job runs under its project's umask (077
unless the operator sets another), so what it creates (a run directory, its output) is its
account's alone, even in a home that ``useradd --create-home`` left readable to all (0755).
Against the real single-node Slurm, with two accounts the test makes and removes."""

from __future__ import annotations

import json
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from xirang_slurm.executor import SlurmExecutor

from tests.pool.accounts import login_accounts
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore


@pytest.fixture
def tenants() -> Iterator[tuple[str, str]]:
    with login_accounts("xrpa", "xrpb") as (a, b):
        yield a, b


def run(service: PoolService, project: str, script: str) -> str:
    """Submit ``script`` as ``project``'s job and tick the pool until it ends; its state."""
    job = service.submit(
        OPERATOR, {"project": project, "cards": 1, "payload": {"command": ["bash", "-c", script]}}
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        service.tick()
        service.settle()  # the executor's calls run outside the pool's lock
        state = service.job(OPERATOR, job["id"])["state"]
        if state not in ("queued", "submitting", "running", "unknown"):
            return str(state)
        time.sleep(0.5)
    raise AssertionError(f"job {job['id']} did not end within 120 s")


def test_a_tenants_job_cannot_read_another_tenants_run_output(
    slurm: str, tmp_path: Path, tenants: tuple[str, str]
) -> None:
    a, b = tenants
    home_a, home_b = (Path(pwd.getpwnam(n).pw_dir) for n in tenants)
    assert home_b.stat().st_mode & 0o005  # useradd's home: others may enter and list it
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": slurm, "type": "cpu", "devices": 1}]
    projects = [{"name": "pa", "guaranteed": 1, "run_as": a}, {"name": "pb", "run_as": b}]
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    store = PoolStore(tmp_path / "pool.db")
    service = PoolService(store, cluster, "priority", "op", SlurmExecutor(tmp_path / "slurm"))
    try:
        written = (
            "mkdir -p $HOME/run/checkpoints && echo secret-of-b > $HOME/run/out; "
            "umask > $HOME/umask"
        )
        assert run(service, "pb", written) == "done"
        assert (home_b / "umask").read_text().strip() == "0077"
        assert (home_b / "run").stat().st_mode & 0o777 == 0o700
        assert (home_b / "run" / "out").stat().st_mode & 0o777 == 0o600
        probe = (
            f"cat {home_b}/run/out {home_b}/umask > $HOME/got 2>&1; "
            f"ls {home_b}/run >> $HOME/got 2>&1"
        )
        run(service, "pa", probe)
        got = (home_a / "got").read_text()
        assert "secret-of-b" not in got and "0077" not in got and "Permission denied" in got, got
    finally:
        service.close()
        store.close()
