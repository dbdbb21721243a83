"""Where the operator's commands take their token from: a token given (``--token``,
XIRANG_POOL_OPERATOR_TOKEN, XIRANG_POOL_TOKEN) always wins; the file ``xirang pool serve``
keeps beside its default state is used only for the URL that service serves at; a refused
token names where it came from; and a ``pool serve`` that fails leaves no file behind."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xirang_service.pool.cli import OPERATOR_TOKEN_ENV, _client, _operator_client

URL = "http://127.0.0.1:1"


@pytest.fixture
def home(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XIRANG_HOME", str(tmp_path))
    monkeypatch.delenv("XIRANG_POOL_TOKEN", raising=False)
    monkeypatch.delenv("XIRANG_POOL_URL", raising=False)
    monkeypatch.delenv(OPERATOR_TOKEN_ENV, raising=False)
    return tmp_path


def args(token: str = "") -> argparse.Namespace:
    return argparse.Namespace(url=URL, token=token)


def keep(home: Path, token: str, url: str) -> None:
    """What ``xirang pool serve`` leaves beside its default state when it served at ``url``."""
    (home / "pool.db.operator-token").write_text(token + "\n")
    (home / "pool.db.operator-url").write_text(url + "\n")


def test_a_given_token_wins_over_the_kept_file(home, monkeypatch) -> None:
    keep(home, "op-from-file", URL)
    assert _operator_client(args()).token == "op-from-file"
    monkeypatch.setenv("XIRANG_POOL_TOKEN", "exported")  # docs/pool.md's `export ...=$(cat ..)`
    assert _operator_client(args()).token == "exported"
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, "op-from-env")
    assert _operator_client(args()).token == "op-from-env"
    assert _operator_client(args("given")).token == "given"


def test_every_command_takes_the_operators_token_where_no_other_is_given(home, monkeypatch) -> None:
    """Issue 53: with only XIRANG_POOL_OPERATOR_TOKEN exported, ``pool status`` and the bare
    ``pool quota`` said "missing token"; a project's token, where there is one, still wins."""
    keep(home, "op-from-file", URL)
    assert _client(args()).token == "op-from-file"
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, "op-from-env")
    assert _client(args()).token == "op-from-env"
    monkeypatch.setenv("XIRANG_POOL_TOKEN", "project")
    assert _client(args()).token == "project"
    assert _client(args("given")).token == "given"


def test_status_and_quotas_answer_an_operator_with_only_the_operator_token(
    home: Path, shell: dict[str, str], other_pool: str
) -> None:
    token = (home / "elsewhere" / "pool.db.operator-token").read_text().strip()
    env = {**shell, "XIRANG_POOL_URL": other_pool, OPERATOR_TOKEN_ENV: token}
    for command in (["status"], ["quota"]):
        done = xirang("pool", *command, "--json", env=env)
        assert done.returncode == 0 and "missing token" not in done.stderr, done.stderr


def test_the_kept_file_is_used_only_for_the_url_it_was_served_at(home) -> None:
    keep(home, "op-from-file", "http://127.0.0.1:8476")
    assert _operator_client(args()).token == ""  # another pool's: not sent to this one
    (home / "pool.db.operator-url").unlink()
    assert _operator_client(args()).token == ""  # a file with no record of where it served


def test_a_token_file_or_store_readable_by_others_is_made_private_again(home) -> None:
    """What an earlier version or a careless copy left readable by every account (a job's
    among them) is mode 0600 once ``xirang pool serve`` opens it."""
    from xirang_service.pool.cli import _operator_token
    from xirang_service.pool.store import PoolStore

    token, store = home / "pool.db.operator-token", home / "pool.db"
    token.write_text("op-from-file\n")
    PoolStore(store).close()
    for path in (token, store):
        path.chmod(0o644)
    assert _operator_token(token) == ("op-from-file", str(token))
    PoolStore(store).close()
    for path in (token, store):
        assert path.stat().st_mode & 0o777 == 0o600, path
    fresh = home / "fresh.operator-token"
    _operator_token(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o600


def xirang(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xirang", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def shell(home: Path) -> dict[str, str]:
    """A user's shell: XIRANG_HOME set, no pool variables."""
    drop = ("XIRANG_POOL_TOKEN", "XIRANG_POOL_URL", OPERATOR_TOKEN_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "XIRANG_HOME": str(home)}


@pytest.fixture
def other_pool(home: Path, shell: dict[str, str], cluster_file: Path) -> Iterator[str]:
    """``xirang pool serve`` on a state other than the default one, until the test ends."""
    state = home / "elsewhere" / "pool.db"
    state.parent.mkdir()
    command = [sys.executable, "-m", "xirang", "pool", "serve", "--cluster", str(cluster_file)]
    command += ["--store", str(state), "--port", "0"]
    process = subprocess.Popen(command, env=shell, stdout=subprocess.PIPE, text=True)
    try:
        printed = ""
        while "operator token written" not in printed:
            line = process.stdout.readline()
            assert line, f"pool serve exited {process.wait()}: {printed}"
            printed += line
        yield printed.split("xirang pool: ", 1)[1].split()[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_issue_trip_a_failed_serve_leaves_nothing_and_the_exported_token_works(
    home: Path, shell: dict[str, str], cluster_file: Path, request: pytest.FixtureRequest
) -> None:
    """The trip of issue #38: ``xirang pool serve`` without --cluster fails and creates
    nothing; a pool started on another state; its token exported as docs/pool.md says;
    ``xirang pool quota PROJECT ...`` works."""
    before = sorted(home.rglob("*"))
    failed = xirang("pool", "serve", "--port", "0", env=shell)
    assert failed.returncode != 0 and "--cluster" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr
    assert sorted(home.rglob("*")) == before  # no store, no token file
    url = request.getfixturevalue("other_pool")
    token = (home / "elsewhere" / "pool.db.operator-token").read_text().strip()
    keep(home, "stale-from-another-pool", url)  # even a file that claims this URL loses
    env = {**shell, "XIRANG_POOL_URL": url, "XIRANG_POOL_TOKEN": token}
    done = xirang("pool", "quota", "vision", "--guaranteed", "4", env=env)
    assert done.returncode == 0, done.stderr
    assert "token" in done.stdout and "vision" in done.stdout


def test_a_refused_token_names_where_it_came_from(
    home: Path, shell: dict[str, str], other_pool: str
) -> None:
    env = {**shell, "XIRANG_POOL_URL": other_pool}
    for given, source in (
        (["--token", "wrong"], "--token"),
        ({"XIRANG_POOL_TOKEN": "wrong"}, "XIRANG_POOL_TOKEN"),
        ({OPERATOR_TOKEN_ENV: "wrong"}, OPERATOR_TOKEN_ENV),
    ):
        argv = given if isinstance(given, list) else []
        extra = given if isinstance(given, dict) else {}
        done = xirang("pool", *argv, "quota", "vision", "--guaranteed", "1", env={**env, **extra})
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "invalid token" in done.stderr and f"came from {source}" in done.stderr, done.stderr
    keep(home, "stale", other_pool)
    done = xirang("pool", "quota", "vision", "--guaranteed", "1", env=env)
    assert f"came from the file {home / 'pool.db.operator-token'}" in done.stderr, done.stderr


def test_a_serve_that_fails_for_a_bad_argument_creates_nothing(
    home: Path, shell: dict[str, str], tmp_path: Path, cluster_file: Path
) -> None:
    with socket.socket() as busy:  # a port another service holds
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        for argv in (
            ["--cluster", str(tmp_path / "missing.yaml"), "--port", "0"],
            ["--policy", "nonesuch", "--port", "0"],
            ["--cluster", str(cluster_file), "--port", port],
        ):
            failed = xirang("pool", "serve", *argv, env=shell)
            assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr
            assert "xirang error:" in failed.stderr, failed.stderr
            assert not list(home.glob("pool.db*"))
    assert f"cannot listen on 127.0.0.1:{port}" in failed.stderr and "--port" in failed.stderr
