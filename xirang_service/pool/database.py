"""The two databases the pool's store runs on: an SQLite file (one machine) and PostgreSQL (a
shared deployment). :mod:`xirang_service.pool.store` writes its SQL once, in the dialect both
understand (``?`` parameters, ``INSERT ... ON CONFLICT``, ``DOUBLE PRECISION``, quoted
``"end"``); the only differences left live here: how parameters are spelled, the
auto-incrementing key and how a write transaction begins.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import math
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from xirang_core.paths import private_file, xirang_home
from xirang_service.pool.errors import PoolError, StoreUnavailable

log = logging.getLogger("xirang.pool")

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class Cursor(Protocol):
    def fetchone(self) -> Mapping[str, Any] | None: ...

    def fetchall(self) -> list[Mapping[str, Any]]: ...

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...


def one_row(cursor: Cursor) -> Mapping[str, Any]:
    """The row of a query that always answers one (an aggregate: ``COUNT``, ``MAX``)."""
    row = cursor.fetchone()
    if row is None:
        raise PoolError("the pool store answered no row to an aggregate query")
    return row


class Database(Protocol):
    """What the store needs from a connection; rows read by column name."""

    location: str
    serial_key: str

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    def script(self, ddl: str) -> None: ...

    def columns(self, table: str) -> set[str]: ...

    def transaction(self) -> Any: ...

    def try_lead(self, wait_s: float = 0.0) -> bool: ...

    def leads(self) -> bool: ...

    def close(self) -> None: ...


def connect(location: str | Path) -> Database:
    """An SQLite file (or ``:memory:``) for a path, PostgreSQL for a ``postgresql://`` URL."""
    text = str(location)
    if text.startswith(POSTGRES_SCHEMES):
        refuse_password(text)
        return PostgresDatabase(text)
    if "://" in text:
        raise PoolError(
            f"unknown pool store '{redact(text)}': give an SQLite file or a "
            "postgresql://user@host/db URL"
        )
    return SQLiteDatabase(text)


#: where a store's password goes instead of its URL (libpq reads each of them)
PASSWORD_HELP = (
    "give it in PGPASSWORD, in ~/.pgpass, or in a file of that format named by PGPASSFILE "
    "(or the URL's ?passfile=FILE), and leave it out of the URL"
)


def refuse_password(location: str) -> None:
    """Refuse a PostgreSQL URL that carries a password: a command line is readable by every
    account of the host (``ps``, ``/proc/PID/cmdline``), the tenants' jobs included."""
    if _passwords(location):
        raise PoolError(
            f"the pool store URL {redact(location)} carries a password, which every account "
            f"on this host can read in ps; {PASSWORD_HELP}"
        )


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


#: beside an SQLite store: the file its one server holds locked
LOCK_SUFFIX = ".serve-lock"
#: the files ``xirang pool serve`` keeps with its state: the operator token, the served URL
TOKEN_SUFFIX, URL_SUFFIX = ".operator-token", ".operator-url"


def beside_state(location: str, suffix: str) -> Path:
    """A file kept with the state: beside an SQLite file, or in XIRANG_HOME for a database URL
    (named by a hash of the URL, so no password lands in a file name)."""
    if "://" not in location:
        return Path(location + suffix)
    digest = hashlib.sha256(location.encode()).hexdigest()[:12]
    return xirang_home() / f"pool-{digest}{suffix}"


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
        self._lock_fd: int | None = None

    def try_lead(self, wait_s: float = 0.0) -> bool:
        """Hold the file's serving lock (``flock``, released by the kernel when this process
        ends, kill -9 included): an SQLite store has one server, since two would each keep
        the pool in memory and overwrite each other. Another server holding it is an error,
        not a standby: replicas need PostgreSQL (so ``wait_s`` waits for nothing)."""
        if self._lock_fd is not None or self.location == ":memory:":
            return True
        # a file of its own: closing another descriptor of the database file would drop
        # SQLite's own POSIX locks on it
        fd = os.open(self.location + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PoolError(
                f"the pool store {self.location} is served by another `xirang pool serve` "
                "(it holds the file's lock): an SQLite store has one server; stop that one, or "
                "put the pool on PostgreSQL (--store postgresql://...) to run replicas "
                f"(the lock is the file {self.location + LOCK_SUFFIX})"
            ) from None
        self._lock_fd = fd
        return True

    def leads(self) -> bool:
        return True  # the lock lives as long as this process

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
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the file releases its flock
            self._lock_fd = None


class PostgresDatabase:
    """One psycopg (v3) connection; statements outside :meth:`transaction` autocommit.

    The service calls in from its HTTP threads and its tick loop; a lock keeps one thread's
    transaction from interleaving with another's statements on the shared connection.

    The connection outlives the server's restarts (a failover, an upgrade): one found dead
    before a statement is replaced by a new one, with a growing pause between failed attempts
    (:data:`RECONNECT_FIRST_S` doubling to :data:`RECONNECT_MAX_S`). While none can be made,
    and for a statement whose connection broke under it, the store answers
    :class:`StoreUnavailable` (503 with ``Retry-After``): the statement's transaction rolled
    back with the connection, so nothing of it was stored, and nothing was acknowledged.
    """

    serial_key = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    def __init__(self, url: str) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise PoolError(
                "a PostgreSQL pool store needs psycopg: pip install 'xirang[postgresql]'"
            ) from None
        self.location = redact(url)
        self._url = url  # holds the password: reconnecting needs it, nothing prints it
        self._pause, self._next_try, self._why = RECONNECT_FIRST_S, 0.0, ""
        self._in_transaction = False
        self._leading: Any = None  # the connection that took the leader's lease
        self.lock = threading.RLock()
        try:
            self.db = self._connect()
        except OSError as exc:
            what = "reach" if isinstance(exc, _Unreachable) else "use"
            raise PoolError(f"cannot {what} the pool store {self.location}: {exc}") from None

    def _connect(self) -> Any:
        """A new connection, or OSError with libpq's first line, its secrets masked (a URL
        libpq cannot parse is quoted back in its error)."""
        import psycopg
        from psycopg.rows import dict_row

        timeout: dict[str, Any] = {}
        if "connect_timeout" not in self._url:
            timeout["connect_timeout"] = CONNECT_TIMEOUT_S
        try:
            return psycopg.connect(self._url, autocommit=True, row_factory=dict_row, **timeout)
        except psycopg.Error as exc:
            text = scrub(str(exc).strip(), self._url)
            detail = text.splitlines()[0] if text else "no answer"
            kind = _Unreachable if isinstance(exc, psycopg.OperationalError) else OSError
            raise kind(detail) from None

    def _live(self) -> Any:
        """The connection, replaced first if the server dropped it (restarted, failed over);
        StoreUnavailable while no new one can be made. Never inside a transaction: its next
        statement would autocommit on the new connection, without the ones before it."""
        if self._in_transaction or not _dead(self.db):
            return self.db
        now = time.monotonic()
        if now < self._next_try:
            raise self._unavailable(self._why, self._next_try - now)
        try:
            fresh = self._connect()
        except OSError as exc:
            self._why, self._next_try = str(exc), now + self._pause
            self._pause = min(2 * self._pause, RECONNECT_MAX_S)
            raise self._unavailable(self._why, self._next_try - now) from None
        self.db.close()
        self.db, self._pause, self._next_try = fresh, RECONNECT_FIRST_S, 0.0
        log.warning("pool store %s: reconnected", self.location)
        return fresh

    @contextmanager
    def _guarded(self, db: Any) -> Iterator[None]:
        """A connection that breaks under a statement is StoreUnavailable (the next statement
        reconnects); any other database error passes as it is."""
        import psycopg

        try:
            yield
        except psycopg.OperationalError as exc:
            if not _dead(db, probe=False):
                raise
            reason = scrub(str(exc).strip(), self._url).splitlines()
            raise self._unavailable(reason[0] if reason else "connection lost", 0.0) from None

    def _unavailable(self, why: str, wait_s: float) -> StoreUnavailable:
        return StoreUnavailable(
            f"the pool store {self.location} is unreachable ({why}); nothing changed, "
            f"try again in {_whole(wait_s)} s",
            retry_after=_whole(wait_s),
        )

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        with self.lock:
            db = self._live()
            with self._guarded(db):
                return db.execute(_params(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.lock:
                db = self._live()
                with self._guarded(db), db.cursor() as cursor:
                    cursor.executemany(_params(sql), rows)

    def script(self, ddl: str) -> None:
        """Each statement on its own: the extended protocol takes one statement at a time."""
        for statement in ddl.split(";"):
            if statement.strip():
                self.execute(statement)

    def columns(self, table: str) -> set[str]:
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return {r["column_name"] for r in rows}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A write transaction; refused (StoreUnavailable) on a replica that took the lease
        and lost it since (fencing: another may lead by now)."""
        with self.lock:
            db = self._live()
            if self._leading is not None and db is not self._leading:
                raise StoreUnavailable(
                    f"this pool replica lost its leader lease on {self.location} (its database "
                    "connection was cut); nothing changed, try again (another replica leads)"
                )
            with self._guarded(db), db.transaction(), db.pipeline():
                self._in_transaction = True
                try:
                    yield
                finally:
                    self._in_transaction = False

    def try_lead(self, wait_s: float = 0.0) -> bool:
        """Take the leader's lease unless another replica holds it: a session advisory lock
        on this connection, which PostgreSQL releases when the session ends (its replica
        killed, its connection cut). With ``wait_s``, wait for it in the server that long:
        PostgreSQL grants it the moment the holder's session ends, so a standby takes over
        at once rather than at its next try. The writes go through the same connection:
        once it is replaced, :meth:`transaction` refuses them, so a replica that lost the
        lease never writes beside the new leader."""
        with self.lock:
            if self.leads():
                return True
            db = self._live()
            with self._guarded(db):
                won = _waited_lock(db, wait_s) if wait_s > 0 else _tried_lock(db)
            if won:
                self._leading = db
            return won

    def leads(self) -> bool:
        """Whether this replica still holds the lease: its connection is the one that took
        it and is alive (a lease once lost is taken again only by :meth:`try_lead`)."""
        with self.lock:
            db = self._leading
            return db is not None and db is self.db and not _dead(db)

    def close(self) -> None:
        with self.lock:  # not under another thread's statement
            self.db.close()


#: the advisory lock every replica of one pool database contends for (b"xirang" as a number)
LEADER_KEY = int.from_bytes(b"xirang", "big")
#: the pause after a failed reconnection, doubled after each one up to the longest
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.25, 2.0
#: how long one attempt to reach the server may take (unless the URL sets connect_timeout)
CONNECT_TIMEOUT_S = 5


class _Unreachable(OSError):
    """libpq could not reach or log in to the server (as opposed to a URL it cannot use)."""


def _tried_lock(db: Any) -> bool:
    """The leader's lock if it is free now."""
    row = db.execute("SELECT pg_try_advisory_lock(%s) AS won", (LEADER_KEY,))
    return bool(one_row(row)["won"])


def _waited_lock(db: Any, wait_s: float) -> bool:
    """The leader's lock, waiting up to ``wait_s`` for it (``lock_timeout`` for this
    transaction only: the session's later statements keep the server's setting). The lock
    is the session's: it outlives the transaction."""
    from psycopg.errors import LockNotAvailable

    try:
        with db.transaction():
            timeout = f"{max(1, round(wait_s * 1000))}ms"
            db.execute("SELECT set_config('lock_timeout', %s, true)", (timeout,))
            db.execute("SELECT pg_advisory_lock(%s)", (LEADER_KEY,))
    except LockNotAvailable:
        return False
    return True


def _dead(db: Any, probe: bool = True) -> bool:
    """Whether ``db`` can no longer serve: closed, broken, or (``probe``) hung up by the server
    while idle. A server that shuts down or restarts tells its idle clients so (a notice, then
    end of file), which makes the socket readable: only then is a ``SELECT 1`` spent to tell a
    hang-up from a stray notice, so a live connection costs no round trip."""
    import psycopg

    if db.closed or db.broken:
        return True
    if not probe or not select.select([db.fileno()], [], [], 0)[0]:
        return False
    try:
        db.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return db.closed or db.broken


def _whole(seconds: float) -> int:
    """Seconds as ``Retry-After`` gives them: whole, at least one."""
    return max(1, math.ceil(seconds))


def _params(sql: str) -> str:
    """``?`` placeholders as psycopg spells them (the store's SQL holds no literal ``?``/``%``)."""
    return sql.replace("?", "%s")
