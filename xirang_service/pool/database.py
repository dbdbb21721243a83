"""The two databases the pool's store runs on: an SQLite file (one machine) and PostgreSQL (a
shared deployment). :mod:`xirang_service.pool.store` writes its SQL once, in the dialect both
understand (``?`` parameters, ``INSERT ... ON CONFLICT``, ``DOUBLE PRECISION``, quoted
``"end"``); the only differences left live here: how parameters are spelled, the
auto-incrementing key and how a write transaction begins.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from xirang_core.paths import private_file
from xirang_service.pool.errors import PoolError

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Cursor(Protocol):
    def fetchone(self) -> Mapping[str, Any] | None: ...

    def fetchall(self) -> list[Mapping[str, Any]]: ...

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...


class Database(Protocol):
    """What the store needs from a connection; rows read by column name."""

    location: str
    serial_key: str

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def script(self, ddl: str) -> None: ...

    def columns(self, table: str) -> set[str]: ...

    def transaction(self) -> Any: ...

    def close(self) -> None: ...


def connect(location: str | Path) -> Database:
    """An SQLite file (or ``:memory:``) for a path, PostgreSQL for a ``postgresql://`` URL."""
    text = str(location)
    if text.startswith(POSTGRES_SCHEMES):
        return PostgresDatabase(text)
    if "://" in text:
        raise PoolError(
            f"unknown pool store '{redact(text)}': give an SQLite file or a "
            "postgresql://user@host/db URL"
        )
    return SQLiteDatabase(text)


def redact(location: str) -> str:
    """The store's location with every password removed, fit for logs and messages: the
    userinfo's (up to the host's ``@``, so a password holding ``/``, ``@`` or ``?`` goes
    whole) and any ``password=`` or ``sslpassword=`` query parameter. It may hide more than
    the password, never less."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        return location
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        rest = user + (":***" if colon else "") + rest[at:]
    return scheme + "://" + _PASSWORD_PARAM.sub(r"\1***", rest)


def scrub(text: str, location: str) -> str:
    """``text`` (a driver's error message) with the passwords of ``location`` masked, whole
    and in pieces, as written and percent-decoded: libpq quotes the part of a URL it cannot
    parse, and a password holding ``/`` or ``@`` is cut there (``u:pw/x@h`` reads as port
    ``pw``)."""
    secrets = _passwords(location)
    pieces = {p for s in secrets for p in re.split(r"[/@?&#:\s]+", s) if len(p) >= 2}
    text = text.replace(location, redact(location))
    for secret in sorted(secrets | pieces, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _passwords(location: str) -> set[str]:
    _, _, rest = location.partition("://")
    found = [m.group(2) for m in _PASSWORD_PARAM.finditer(rest)]
    at = rest.rfind("@")
    if at >= 0 and ":" in rest[:at]:
        found.append(rest[:at].partition(":")[2])
    return {s for raw in found for s in (raw, unquote(raw)) if s}


#: a ``password=`` (or libpq's ``sslpassword=``, the client key's) query parameter, up to the
#: next ``&name=`` (a raw ``&`` in it stays hidden)
_PASSWORD_PARAM = re.compile(r"([?&](?:ssl)?password=)(.*?)(?=&[A-Za-z_]+=|$)", re.IGNORECASE)


def _keep_private(path: str) -> None:
    """A store file (and its ``-wal``, ``-shm``) an earlier version or a hand left readable
    to others, job accounts among them, made 0600 again."""
    for file in (Path(path), Path(path + "-wal"), Path(path + "-shm")):
        if file.exists() and file.stat().st_mode & 0o077:
            file.chmod(0o600)


class SQLiteDatabase:
    """One SQLite file in WAL mode, so other processes read while the service writes."""

    serial_key = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, path: str) -> None:
        self.location = path
        if path != ":memory:":
            private_file(path)  # the store holds token hashes and every project's jobs
            _keep_private(path)
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        return self.db.execute(sql, tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)

    def script(self, ddl: str) -> None:
        self.db.executescript(ddl)

    def columns(self, table: str) -> set[str]:
        return {r["name"] for r in self.db.execute(f"PRAGMA table_info({table})")}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE``: the write lock up front, so two writers never deadlock."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class PostgresDatabase:
    """One psycopg (v3) connection; statements outside :meth:`transaction` autocommit.

    The service calls in from its HTTP threads and its tick loop; a lock keeps one thread's
    transaction from interleaving with another's statements on the shared connection.
    """

    serial_key = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ImportError:
            raise PoolError(
                "a PostgreSQL pool store needs psycopg: pip install 'xirang[postgresql]'"
            ) from None
        self.location = redact(url)
        try:
            self.db = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        except psycopg.Error as exc:  # a URL libpq cannot parse too: its text may hold secrets
            text = scrub(str(exc).strip(), url)
            detail = text.splitlines()[0] if text else "no answer"
            what = "reach" if isinstance(exc, psycopg.OperationalError) else "use"
            raise PoolError(f"cannot {what} the pool store {self.location}: {detail}") from None
        self.lock = threading.RLock()

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        with self.lock:
            return self.db.execute(_params(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.lock, self.db.cursor() as cursor:
                cursor.executemany(_params(sql), rows)

    def script(self, ddl: str) -> None:
        """Each statement on its own: the extended protocol takes one statement at a time."""
        with self.lock:
            for statement in ddl.split(";"):
                if statement.strip():
                    self.db.execute(statement)

    def columns(self, table: str) -> set[str]:
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return {r["column_name"] for r in rows}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.lock, self.db.transaction():
            yield

    def close(self) -> None:
        self.db.close()


def _params(sql: str) -> str:
    """``?`` placeholders as psycopg spells them (the store's SQL holds no literal ``?``/``%``)."""
    return sql.replace("?", "%s")
