"""Quotas hold however a job reaches Slurm: the pool keeps each project's Slurm association
(account, its ``run_as`` user, ``GrpTRES`` at guaranteed plus borrowable cards) through
``sacctmgr``, so a tenant's own ``sbatch``, submitted without the pool, pends behind it.

Against the real multi-node test bed with accounting (.ci/services/slurm_multinode.sh:
slurmdbd on MariaDB, ``AccountingStorageEnforce=limits``) and accounts the tests make and
remove."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from xirang_slurm import inventory
from xirang_slurm.executor import SlurmExecutor
from xirang_slurm.limits import tres

from tests.plugins.xirang_slurm.conftest import MultiNodeSlurm
from tests.pool.accounts import login_accounts
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore


@pytest.fixture
def accounting(slurm_multinode: MultiNodeSlurm, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test bed's cluster name, once it is known to enforce association limits (the
    Slurm commands of the test and of the pool talk to it)."""
    config = slurm_multinode.run("scontrol", "show", "config")
    if "AccountingStorageEnforce = associations,limits" not in config:
        problem = "the multi-node Slurm enforces no limits (start it with MN_ACCOUNTING=1)"
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    monkeypatch.setenv("SLURM_CONF", str(slurm_multinode.conf))
    (line,) = [ln for ln in config.splitlines() if ln.startswith("ClusterName ")]
    return line.split("=")[1].strip()


@pytest.fixture
def project(accounting: str) -> Iterator[str]:
    """A project name of this test's own; its Slurm account is removed afterwards."""
    name = f"lim-{secrets.token_hex(3)}"
    yield name
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # refused while its jobs are ending
        done = subprocess.run(["sacctmgr", "-i", "remove", "account", name], capture_output=True)
        if done.returncode == 0 or b"Nothing deleted" in done.stdout:
            return
        time.sleep(0.5)


def pool(tmp_path: Path, projects: list[dict]) -> PoolService:
    """The pool service with the Slurm executor over the test bed's nodes (one card each)."""
    cluster = tmp_path / "cluster.yaml"
    nodes = [{**node, "devices": 1} for node in inventory.nodes()]
    cluster.write_text(yaml.safe_dump({"nodes": nodes, "projects": projects}))
    executor = SlurmExecutor(tmp_path / "slurm")
    return PoolService(PoolStore(tmp_path / "pool.db"), cluster, "priority", "op", executor)


def association(cluster: str, account: str) -> dict[str, str]:
    """The account's associations on the cluster: user ('' for the account's own): GrpTRES."""
    where = (f"account={account}", f"cluster={cluster}", "format=user,grptres")
    out = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "assoc", *where],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("|") for line in out.splitlines())


def own_sbatch(user: str) -> str:
    """A one-CPU job the tenant submits itself, with no pool in between (its default account)."""
    job = ("--parsable", "-n1", "-o", "/dev/null", "--wrap", "sleep 300")
    return subprocess.run(
        ["runuser", "-u", user, "--", "sbatch", *job],
        capture_output=True,
        text=True,
        check=True,
        cwd="/tmp",
    ).stdout.strip()


def settled(job: str, state: str, reason: str = "") -> tuple[str, str]:
    """The job's state and reason once they are ``state`` and one starting with ``reason`` (or
    after 120 s, whatever they are: another test's jobs may hold the CPUs a while);
    ``("gone", "")`` once Slurm has it no more."""
    deadline = time.monotonic() + 120
    while True:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True
        ).stdout.split() or ["gone", ""]
        if (out[0] == state and out[1].startswith(reason)) or time.monotonic() > deadline:
            return out[0], out[1]
        time.sleep(0.3)


@pytest.mark.service
def test_a_tenants_own_sbatch_pends_behind_its_projects_quota(
    accounting: str, project: str, tmp_path: Path
) -> None:
    with login_accounts("xrqa", "xrqb") as (a, b):
        projects = [{"name": project, "guaranteed": 1, "borrow_limit": 0, "run_as": a}]
        service = pool(tmp_path, projects)
        try:
            service.settle()  # the limits are set by the executor's thread
            assert association(accounting, project) == {"": "cpu=1", a: ""}
            first = own_sbatch(a)
            assert settled(first, "RUNNING") == ("RUNNING", "None")
            second = own_sbatch(a)  # one CPU more than the project's one card
            state, reason = settled(second, "PENDING", "AssocGrp")
            assert state == "PENDING" and reason.startswith("AssocGrp"), (state, reason)

            # the operator lends it one more card: Slurm lets the second job run
            service.set_quota(OPERATOR, project, {"borrow_limit": 1})
            service.settle()
            assert association(accounting, project) == {"": "cpu=2", a: ""}
            assert settled(second, "RUNNING") == ("RUNNING", "None")

            # its jobs now run as another account: only that one may submit under it (Slurm
            # keeps an association while jobs of it run)
            subprocess.run(["scancel", first, second], check=True)
            assert settled(first, "gone") == settled(second, "gone") == ("gone", "")
            service.set_quota(OPERATOR, project, {"run_as": b, "borrow_limit": None})
            service.settle()
            assert association(accounting, project) == {"": "", b: ""}
        finally:
            service.close()


@pytest.mark.service
def test_a_limit_slurm_refuses_is_reported_and_tried_again(
    accounting: str, project: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """sacctmgr refusing (here: a cluster slurmdbd does not know) is a warning naming the
    project and the limit, never an exception in the pool's loop; the next poll tries again."""
    executor = SlurmExecutor(tmp_path / "slurm")
    executor.retry_limits = 0
    with caplog.at_level(logging.WARNING, logger="xirang.pool"):
        executor.limit(project, "root", 3, ["cpu"])  # learns the cluster and sets the limit
        assert association(accounting, project) == {"": "cpu=3", "root": ""}
        executor.cluster = "no-such-cluster"
        executor.limit(project, "root", 4, ["cpu"])
        executor.poll()
    refused = [r.getMessage() for r in caplog.records if "is not set" in r.getMessage()]
    assert len(refused) == 2 and f"project {project}'s Slurm limit (GrpTRES=cpu=4)" in refused[0]
    assert executor.limits == {project: ("root", "cpu=4")}  # kept for the next try
    assert association(accounting, project) == {"": "cpu=3", "root": ""}


@pytest.mark.parametrize(
    ("types", "cards", "want"),
    [
        (["cpu"], 2, "cpu=2"),  # the test bed: a CPU card is one Slurm CPU
        (["a100", "cuda"], 8, "gres/gpu=8"),  # a GPU gres type (inventory) or a runtime
        (["ascend", "cpu"], None, "cpu=-1,gres/npu=-1"),  # unlimited borrowing: no limit
    ],
)
def test_a_projects_cards_are_counted_in_the_tres_of_the_pools_device_types(
    types: list[str], cards: int | None, want: str
) -> None:
    assert tres(types, cards) == want
