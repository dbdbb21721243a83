"""The PostgreSQL store's password comes from where libpq keeps passwords (``PGPASSWORD``,
``~/.pgpass``, a file named by ``PGPASSFILE``), never from the ``--store`` URL: a command line
is readable by every account on the host (``ps``), the tenants' jobs included. A URL with one
is refused, with where to put it instead, and without printing it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from xirang_service.pool.errors import PoolError
from xirang_service.pool.store import PoolStore


@pytest.fixture
def password_role(postgres_cluster: str) -> Iterator[tuple[str, str, str]]:
    """A role that must log in with its password (scram-sha-256 in pg_hba.conf, ahead of the
    test cluster's ``trust``), and a database it owns: (its URL without the password, the
    role, the password)."""
    import psycopg

    role, password = f"xr_pw_{secrets.token_hex(3)}", secrets.token_urlsafe(12)
    folder = Path(postgres_cluster.rpartition("host=")[2])
    hba = folder / "data" / "pg_hba.conf"
    before = hba.read_text()
    hba.write_text(f"local all {role} scram-sha-256\n{before}")
    with psycopg.connect(postgres_cluster, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        db.execute(f"CREATE DATABASE {role} OWNER {role}")
        db.execute("SELECT pg_reload_conf()")
    try:
        yield f"postgresql://{role}@/{role}?host={folder}&connect_timeout=5", role, password
    finally:
        hba.write_text(before)
        with psycopg.connect(postgres_cluster, autocommit=True) as db:
            db.execute("SELECT pg_reload_conf()")
            db.execute(f"DROP DATABASE {role} WITH (FORCE)")
            db.execute(f"DROP ROLE {role}")


def opens(url: str) -> bool:
    store = PoolStore(url)
    try:
        return store.meta("schema_version") == "1"
    finally:
        store.close()


@pytest.mark.service
def test_the_password_comes_from_pgpassword_pgpass_or_a_file(
    password_role: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, role, password = password_role
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("PGPASSFILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(PoolError, match="cannot reach the pool store"):
        PoolStore(url)  # it does need one
    monkeypatch.setenv("PGPASSWORD", password)
    assert opens(url)
    monkeypatch.delenv("PGPASSWORD")
    line = f"*:*:{role}:{role}:{password}\n"
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(line)
    pgpass.chmod(0o600)
    assert opens(url)
    pgpass.unlink()
    elsewhere = tmp_path / "store-password"
    elsewhere.write_text(line)
    elsewhere.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(elsewhere))
    assert opens(url)


@pytest.mark.service
def test_a_password_in_the_url_is_refused_with_where_it_goes(
    password_role: tuple[str, str, str],
) -> None:
    url, role, password = password_role
    for carrying in (
        url.replace(f"{role}@", f"{role}:{password}@"),
        f"{url}&password={password}",
    ):
        with pytest.raises(PoolError) as err:
            PoolStore(carrying)
        message = str(err.value)
        assert password not in message and "ps" in message, message
        assert "PGPASSWORD" in message and "~/.pgpass" in message and "PGPASSFILE" in message


def test_no_server_needed_to_refuse_it(tmp_path: Path) -> None:
    """Refused before any connection is tried (nothing listens at ``tmp_path``)."""
    with pytest.raises(PoolError, match="carries a password"):
        PoolStore(f"postgresql://alice:pw-Zq81@/pool?host={tmp_path}")
