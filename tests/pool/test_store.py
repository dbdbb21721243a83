"""Where the pool keeps its state: the location picks the database, and a password never shows."""

from __future__ import annotations

import pytest

from xirang_service.pool.database import SQLiteDatabase, redact
from xirang_service.pool.errors import PoolError
from xirang_service.pool.store import PoolStore


def test_a_path_is_an_sqlite_file(tmp_path) -> None:
    store = PoolStore(tmp_path / "sub" / "pool.db")
    assert isinstance(store.db, SQLiteDatabase)
    assert store.meta("schema_version") == "1"
    store.close()


def test_unreachable_postgresql_names_the_store(tmp_path) -> None:
    url = f"postgresql://alice@/pool?host={tmp_path}&connect_timeout=5"
    with pytest.raises(PoolError, match="cannot reach the pool store") as err:
        PoolStore(url)
    assert "postgresql://alice@/pool" in str(err.value)


def test_a_store_url_with_a_password_is_refused_without_showing_it(tmp_path) -> None:
    url = f"postgresql://alice:s3cret@/pool?host={tmp_path}&connect_timeout=5"
    with pytest.raises(PoolError, match=r"carries a password.*PGPASSWORD") as err:
        PoolStore(url)
    assert "s3cret" not in str(err.value) and "alice:***@" in str(err.value)


def test_unknown_scheme_is_refused() -> None:
    with pytest.raises(PoolError, match="give an SQLite file or a postgresql://"):
        PoolStore("mysql://root:pw@db/pool")


def test_redact_keeps_everything_but_the_password() -> None:
    assert redact("postgresql://u:p@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_store_location_round_trips_the_read_api(store_location: str) -> None:
    """Both databases answer the documented read API the same way (console, metering)."""
    store = PoolStore(store_location)
    store.set_meta("cluster", "{}")
    store.set_meta("cluster", '{"x": 1}')
    assert store.meta("cluster") == '{"x": 1}'
    assert store.jobs() == [] and store.segments() == [] and store.events() == []
    assert not store.initialised()
    store.close()


def test_executor_handles_survive_a_reopen_and_are_replaced_by_a_new_start(
    store_location: str,
) -> None:
    """A restarted pool reads back the Slurm job id each running job was given; a job started
    again (after a preemption) has its new id, not the old one."""
    store = PoolStore(store_location)
    store.save_handle(3, "101")
    store.save_handle(4, "102")
    store.save_handle(3, "205")
    store.close()
    reopened = PoolStore(store_location)
    assert reopened.handles() == {3: "205", 4: "102"}
    reopened.close()
