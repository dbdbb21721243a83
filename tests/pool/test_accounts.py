"""A project's ``run_as`` is the wall between tenants: a login account of this host (uid in
``UID_MIN..UID_MAX``), not another project's unless the operator shares it on purpose, and
clearable; its jobs run with the project's umask (077 unless the operator sets another)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pool.accounts import login_accounts
from tests.pool.web import OPERATOR as WEB_OPERATOR
from tests.pool.web import served
from xirang_service.pool.accounts import job_umask, uid_range
from xirang_service.pool.cli import main as cli_main
from xirang_service.pool.errors import PoolError
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore


@pytest.fixture
def accounts() -> Iterator[list[str]]:
    """Two login accounts of this machine (``useradd --create-home``), removed afterwards."""
    with login_accounts("xrten", "xrten") as names:
        yield names


@pytest.fixture
def service(tmp_path: Path) -> Iterator[PoolService]:
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": "n1", "type": "gpu", "devices": 2}]
    projects = [{"name": "nlp", "guaranteed": 1}, {"name": "cv", "guaranteed": 1}]
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    store = PoolStore(tmp_path / "pool.db")
    yield PoolService(store, cluster, "priority", "op-token")
    store.close()


def refusal(call: object, *args: object) -> PoolError:
    with pytest.raises(PoolError) as err:
        call(*args)  # type: ignore[operator]
    return err.value


def test_system_accounts_are_refused_naming_the_login_range(service: PoolService) -> None:
    low, high = uid_range()
    for system in ("daemon", "nobody"):
        error = refusal(service.set_quota, OPERATOR, "nlp", {"run_as": system})
        assert error.status == 400
        assert "system account" in str(error) and f"{low}..{high}" in str(error), str(error)
    assert service.quotas(OPERATOR)[0]["run_as"] == ""


def test_another_projects_account_is_refused_unless_shared_and_run_as_clears(
    service: PoolService, accounts: list[str]
) -> None:
    first, _ = accounts
    assert service.set_quota(OPERATOR, "nlp", {"run_as": first})["run_as"] == first
    error = refusal(service.set_quota, OPERATOR, "cv", {"run_as": first})
    assert error.status == 409
    assert "project 'nlp'" in str(error) and "--shared-account" in str(error), str(error)
    shared = service.set_quota(OPERATOR, "cv", {"run_as": first, "shared_account": True})
    assert shared["run_as"] == first
    edited = service.set_quota(OPERATOR, "cv", {"guaranteed": 1, "rotate_token": True})
    assert edited["run_as"] == first and edited["token"]  # an edit keeps the agreed sharing
    assert service.set_quota(OPERATOR, "nlp", {"run_as": ""})["run_as"] == ""
    assert service.set_quota(OPERATOR, "cv", {"run_as": first})["run_as"] == first  # alone now


def test_the_cli_clears_shares_and_sets_the_umask(
    tmp_path: Path, cluster_file: Path, accounts: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the REST API and ``xirang pool quota``: the umask shows in octal, 077 by default;
    a refusal is one error naming the way out."""
    first, _ = accounts
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        base = ["--url", pool.url, "--token", WEB_OPERATOR, "--json", "quota"]
        assert cli_main([*base, "nlp", "--run-as", first]) == 0
        row = json.loads(capsys.readouterr().out)
        assert row["run_as"] == first and row["umask"] == "077"
        error = refusal(cli_main, [*base, "cv", "--run-as", first])
        assert error.status == 409 and "--shared-account" in str(error)
        assert cli_main([*base, "cv", "--run-as", first, "--shared-account", "--umask", "027"]) == 0
        row = json.loads(capsys.readouterr().out)
        assert row["run_as"] == first and row["umask"] == "027"
        assert cli_main([*base, "cv", "--run-as", ""]) == 0
        assert json.loads(capsys.readouterr().out)["run_as"] == ""


def test_a_cluster_file_with_two_projects_on_one_account_is_refused(
    tmp_path: Path, accounts: list[str]
) -> None:
    first, _ = accounts
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": "n1", "type": "gpu", "devices": 2}]
    projects = [{"name": "nlp", "run_as": first}, {"name": "cv", "run_as": first}]
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    with pytest.raises(PoolError, match="already project 'nlp''s account"):
        PoolService(PoolStore(tmp_path / "a.db"), cluster)
    projects[1]["shared_account"] = True
    cluster.write_text(json.dumps({"nodes": nodes, "projects": projects}))
    store = PoolStore(tmp_path / "b.db")
    service = PoolService(store, cluster)
    assert [row["run_as"] for row in service.quotas(OPERATOR)] == [first, first]
    store.close()


def test_a_job_starts_under_its_projects_umask(tmp_path: Path) -> None:
    """What the executor runs at the start (``runuser``, ``sbatch``) inherits the umask."""
    probe, before = tmp_path / "probe", os.umask(0o022)
    with job_umask(0o077):
        subprocess.run(["bash", "-c", f"mkdir {probe} && touch {probe}/f"], check=True)
    assert oct(probe.stat().st_mode & 0o777) == oct(0o700)
    assert oct((probe / "f").stat().st_mode & 0o777) == oct(0o600)
    assert os.umask(before) == 0o022  # the process's own umask is back
