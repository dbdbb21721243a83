"""Replicas of the pool service: several ``xirang pool serve`` on one PostgreSQL store, one
leading, the others standing by (as Slurm's backup controller and Kubernetes' leader election).

The lease is a PostgreSQL advisory lock on the store's own connection
(:meth:`~xirang_service.pool.database.PostgresDatabase.try_lead`): PostgreSQL drops it when
the leader's session ends, a kill -9 included, and a standby, waiting for it in PostgreSQL
(:data:`POLL_S` at a time), is granted it at that moment, builds the pool from the store
(every acknowledged job is there: a job is acknowledged only once its transaction committed)
and serves. Only the leader has a
:class:`~xirang_service.pool.service.PoolService`: it alone runs scheduling passes, ticks
and executors. A leader whose connection is cut stands down at once, and its store refuses
writes from then on (fencing), so an old leader's in-flight request cannot write beside the
new one; each term has a store (a connection) of its own. A standby answers every request
503 with ``Retry-After`` and the leader's URL, which each leader records in the store.

An SQLite store has one server: its lease is a file lock, and a second ``xirang pool serve``
on the same file is refused with one clear error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from xirang_service.pool.errors import PoolError, StoreUnavailable
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

log = logging.getLogger("xirang.pool")
#: how long a standby waits for the lease in PostgreSQL at a time (it is granted the moment
#: the leader's session ends), and how often a leader checks it still holds it
POLL_S = 0.5
#: the ``meta`` key where each leader records the URL it serves at
LEADER_KEY = "leader_url"


class Replica:
    """One ``xirang pool serve``: leads while it holds the store's lease, else stands by.

    ``open_store`` opens a new connection to the store (one per term); ``build`` makes the
    service over a store whose lease this replica has just taken."""

    def __init__(
        self,
        store: PoolStore,
        open_store: Callable[[], PoolStore],
        build: Callable[[PoolStore], PoolService],
        url: str,
    ) -> None:
        self.store: PoolStore | None = store
        self.open_store, self.build, self.url = open_store, build, url
        #: the pool while this replica leads; None while it stands by
        self.service: PoolService | None = None
        #: the leader's URL as last read from the store ('' when unknown)
        self.leader = ""

    def step(self, wait_s: float = 0.0) -> None:
        """One round: a leader that lost its lease stands down; a standby tries to take it,
        waiting up to ``wait_s`` for it, and on winning builds the pool from the store and
        serves it. A store that is away leaves it standing by until the next round; any
        other error is the caller's."""
        if self.service is not None:
            if self.service.store.db.leads():
                return
            self._stand_down()
        try:
            self._contend(wait_s)
        except StoreUnavailable as exc:
            log.warning("pool replica: the store is away (%s); standing by", exc)

    def _contend(self, wait_s: float) -> None:
        store = self.store = self.store or self.open_store()
        if not store.db.try_lead(wait_s):
            self.leader = store.meta(LEADER_KEY) or ""
            return
        started = time.monotonic()
        log.warning("DEBUG won %.3f", time.time())
        service = self.build(store)
        store.set_meta(LEADER_KEY, self.url)
        self.service, self.leader, self.store = service, self.url, None
        log.warning("DEBUG lead %.3f", time.time())
        log.warning(
            "pool replica: leading at %s (%d job(s) restored in %.2f s)",
            self.url,
            service.restored,
            time.monotonic() - started,
        )

    def _stand_down(self) -> None:
        """Drop the pool of a term whose lease is gone: its requests still in flight find
        their store closed and fenced (reads reconnect, writes are refused)."""
        assert self.service is not None
        log.warning("pool replica: lost the leader lease; standing by")
        old, self.service, self.leader = self.service, None, ""
        old.close()

    def run(self, stop: threading.Event, tick_s: float = 2.0) -> None:
        """Until ``stop``: a round every :data:`POLL_S` (a standby's spent waiting for the
        lease), and, leading, tick the pool every ``tick_s``."""
        next_tick = time.monotonic() + tick_s
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.step(POLL_S)
            except PoolError as exc:  # building the pool failed: try again next round
                log.warning("pool replica: cannot lead: %s", exc)
            if self.service is not None and time.monotonic() >= next_tick:
                self.service.tick()
                next_tick = time.monotonic() + tick_s
            stop.wait(max(0.0, began + POLL_S - time.monotonic()))

    def standby_answer(self) -> tuple[str, str]:
        """What a standby says (503): the message, and the leader's URL ('' if unknown)."""
        if self.leader and self.leader != self.url:
            return (
                f"this pool replica ({self.url}) is a standby; the leader is at {self.leader}: "
                "send the request there (nothing changed here)",
                self.leader,
            )
        return (
            f"no pool replica leads right now ({self.url} stands by: an election is under way "
            "or the store is away); nothing changed, try again",
            "",
        )

    def close(self) -> None:
        for store in (self.store, self.service.store if self.service else None):
            if store is not None:
                store.close()
