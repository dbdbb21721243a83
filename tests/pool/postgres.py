"""A throwaway PostgreSQL cluster for the store tests: initdb in a temporary folder, listening
only on a Unix socket in that folder (no TCP port to collide with), stopped and removed after.

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user
(created by Debian's package, or by .ci/services/postgresql.sh). Without PostgreSQL the tests
skip here and FAIL in CI (CI=true), where .ci/services/postgresql.sh installs it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def bin_dir() -> Path | None:
    """The newest installed server's binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _version(path: str) -> float:
    try:
        return float(Path(path).parts[-3])
    except ValueError:
        return 0.0


def missing(problem: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{problem} (CI must run .ci/services/postgresql.sh)")
    pytest.skip(problem)


@contextmanager
def cluster() -> Iterator[str]:
    """Start a cluster; yields the URL of its ``postgres`` database."""
    binaries = bin_dir()
    if binaries is None:
        missing("PostgreSQL is not installed")
    run_as = _server_user()
    folder = Path(tempfile.mkdtemp(prefix="xirang-pg-"))
    try:
        if run_as:
            os.chown(folder, run_as.pw_uid, run_as.pw_gid)
        data = folder / "data"
        _run(
            run_as,
            binaries / "initdb",
            "-D",
            data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        url = f"postgresql://postgres@/postgres?host={folder}"
        start(url)
        try:
            yield url
        finally:
            stop(url, "immediate")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start(url: str) -> None:
    """Start (again) the server of :func:`cluster`'s ``url``."""
    folder = Path(url.rpartition("host=")[2])
    options = f"-c listen_addresses='' -k {folder} -c fsync=off -c full_page_writes=off"
    data, log = folder / "data", folder / "server.log"
    pg_ctl = _pg_ctl()
    _run(_server_user(), pg_ctl, "-D", data, "-l", log, "-w", "-t", "120", "-o", options, "start")


def stop(url: str, mode: str = "fast") -> None:
    """Stop the server of ``url`` (``fast``: its clients are told and disconnected, as in a
    restart or a failover; ``immediate``: as in a crash)."""
    data = Path(url.rpartition("host=")[2]) / "data"
    if (data / "postmaster.pid").exists():  # a test that stopped it and failed leaves it so
        _run(_server_user(), _pg_ctl(), "-D", data, "-m", mode, "-w", "stop")


def _pg_ctl() -> Path:
    binaries = bin_dir()
    assert binaries is not None
    return binaries / "pg_ctl"


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: nobody special unless we are root, then ``postgres``."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        missing("running as root and there is no 'postgres' user to run the server")
    return None


def _run(user: pwd.struct_passwd | None, *command: object) -> None:
    argv = [str(c) for c in command]
    if user is not None:
        argv = ["runuser", "-u", user.pw_name, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the cluster at ``url``; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'CREATE DATABASE "{name}"')
    return url.replace("/postgres?", f"/{name}?", 1)
