"""Shards from the origin through the tiers: decoded in memory, bytes on local disk, origin.

Every shard is checked against its index checksum wherever it came from. A bad copy is dropped
and fetched once more straight from the origin; a second bad copy is an error naming the shard,
never silently read. Memory holds decoded shards up to a byte budget and, like the disk cache,
evicts the one needed furthest in the future.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import pyarrow as pa

from xirang import DataError
from xirang.data import DiskCache, FsspecTier, NextUse, RetryPolicy, Throttle, furthest_first
from xirang_data import shards
from xirang_data.shards import ShardInfo
from xirang_data.snapshot import Snapshot


@dataclass(frozen=True)
class TierSettings:
    """Byte budgets and origin limits (``data.cache_*`` and ``data.origin_*``)."""

    cache_dir: str = ""  # empty: no disk tier, read the origin directly
    cache_limit_bytes: int = 8 * 2**30
    memory_limit_bytes: int = 2 * 2**30
    prefetch_shards: int = 4
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class ShardFetcher:
    """Decoded shards by index position, through memory, the disk cache and the origin."""

    def __init__(self, origin: FsspecTier, infos: tuple[ShardInfo, ...], settings: TierSettings):
        self.origin, self.infos, self.settings = origin, infos, settings
        self.throttle = Throttle(settings.retry)
        self.disk = (
            DiskCache(settings.cache_dir, settings.cache_limit_bytes)
            if settings.cache_dir
            else None
        )
        self.memory: dict[int, pa.Table] = {}
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=max(1, settings.retry.max_concurrency))
        self.inflight: dict[int, Future[pa.Table]] = {}
        self.origin_bytes = 0

    def table(self, shard: int, next_use: Callable[[int], float], protect: set[int]) -> pa.Table:
        """Shard ``shard`` decoded; waits for its prefetch if one is running."""
        with self.lock:
            if shard in self.memory:
                return self.memory[shard]
            future = self.inflight.get(shard)
        table = future.result() if future else self._load(shard, next_use, protect)
        self._remember(shard, table, next_use, protect)
        return table

    def prefetch(
        self,
        shards_ahead: list[int],
        next_use: Callable[[int], float],
        protect: set[int],
        extra: int = 0,
    ) -> None:
        """Start loading upcoming shards in exactly the order they will be read: the first
        ``extra`` (needed now) plus ``prefetch_shards`` more. The look-ahead loads start once
        the needed ones are done, so they do not share the CPU and the link with them (the
        first batch of a block waits for its own shards only)."""
        needed: list[Future[pa.Table]] = []
        for index, shard in enumerate(shards_ahead[: extra + self.settings.prefetch_shards]):
            with self.lock:
                if shard in self.memory or shard in self.inflight:
                    if index < extra and shard in self.inflight:
                        needed.append(self.inflight[shard])
                    continue
                after = [] if index < extra else list(needed)
                future = self.pool.submit(self._load_after, after, shard, next_use, protect)
                self.inflight[shard] = future
                if index < extra:
                    needed.append(future)
            future.add_done_callback(
                functools.partial(self._prefetched, shard, next_use=next_use, protect=protect)
            )

    def _load_after(
        self, first: list[Future], shard: int, next_use: Callable[[int], float], protect: set[int]
    ) -> pa.Table:
        """Load ``shard`` once ``first`` are done: they were submitted earlier, so the pool
        (first in, first out) runs them before this task and the wait cannot deadlock."""
        wait(first)
        return self._load(shard, next_use, protect)

    def _prefetched(
        self, shard: int, future: Future, next_use: Callable[[int], float], protect: set[int]
    ) -> None:
        if future.exception() is None:
            self._remember(shard, future.result(), next_use, protect)
        with self.lock:
            self.inflight.pop(shard, None)

    def _remember(
        self, shard: int, table: pa.Table, next_use: Callable[[int], float], protect: set[int]
    ) -> None:
        """Keep a decoded shard in memory, evicting furthest-in-future ones over the budget."""
        with self.lock:
            self.memory[shard] = table
            used = sum(t.nbytes for t in self.memory.values())
            keys = [str(k) for k in self.memory if k not in protect and k != shard]
            for victim in furthest_first(keys, lambda k: next_use(int(k))):
                if used <= self.settings.memory_limit_bytes:
                    break
                used -= self.memory.pop(int(victim)).nbytes

    def _load(self, shard: int, next_use: Callable[[int], float], protect: set[int]) -> pa.Table:
        return shards.decode(self.verified(shard, next_use, protect), self.infos[shard].key)

    def verified(self, shard: int, next_use: Callable[[int], float], protect: set[int]) -> bytes:
        """Shard ``shard``'s bytes (disk cache, else origin), checked against its sha256."""
        return self._checked(self.infos[shard], next_use, protect)

    def sidecar(
        self, shard: int, next_use: Callable[[int], float], protect: set[int]
    ) -> bytes | None:
        """Shard ``shard``'s sidecar index, checked against the sha256 its manifest entry
        holds; None where it has none, or no good copy is found (read the shard whole then)."""
        info = self.infos[shard].sidecar
        if info is None:
            return None
        try:
            return self._checked(info, next_use, protect)
        except DataError:  # missing or corrupt at the origin: the whole shard still serves
            return None

    def read_range(self, shard: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of shard ``shard``, unchecked (the caller checks them): from
        the disk cache where it holds the shard, else by a ranged read of the origin."""
        info = self.infos[shard]
        held = self.disk.read_range(info.key, start, end) if self.disk else None
        if held is not None:
            return held
        data = self.throttle.call(lambda: self.origin.read_range(info.key, start, end))
        self.origin_bytes += len(data)
        return data

    def _checked(
        self, info: ShardInfo, next_use: Callable[[int], float], protect: set[int]
    ) -> bytes:
        """An object's bytes (disk cache, else origin), checked against its sha256: a bad copy
        is dropped and fetched again from the origin; a second bad copy is a DataError."""
        data = self._bytes(info, self._key_use(next_use), {self.infos[p].key for p in protect})
        if not shards.checksum_ok(data, info):
            if self.disk:
                self.disk.evict(info.key)
            data = self._from_origin(info)
            if not shards.checksum_ok(data, info):
                raise DataError(
                    f"shard {info.key} is corrupt or truncated at the origin {self.origin.root} "
                    f"({len(data)} bytes, expected {info.bytes} with sha256 {info.sha256[:12]}…); "
                    "re-run `xirang data prepare` or `xirang data sync` for this snapshot"
                )
            if self.disk:
                self.disk.store(info.key, data, self._key_use(next_use), set())
        return data

    def _bytes(self, info: ShardInfo, next_use: NextUse, protect: set[str]) -> bytes:
        if self.disk is None:
            return self._from_origin(info)
        return self.disk.get(info.key, lambda: self._from_origin(info), next_use, protect)

    def _from_origin(self, info: ShardInfo) -> bytes:
        try:
            data = self.throttle.call(lambda: self.origin.read(info.key))
        except FileNotFoundError:
            raise DataError(
                f"shard {info.key} of this snapshot is missing at the origin {self.origin.root} "
                "(deleted, or the snapshot copied without it); re-run `xirang data prepare` or "
                "`xirang data sync` for this snapshot"
            ) from None
        self.origin_bytes += len(data)
        return data

    def _key_use(self, next_use: Callable[[int], float]) -> NextUse:
        index = self._positions
        return lambda key: next_use(index[key]) if key in index else float("inf")

    @functools.cached_property
    def _positions(self) -> dict[str, int]:
        """Each shard key's index position (a sidecar's key is none: evicted first)."""
        return {info.key: i for i, info in enumerate(self.infos)}

    def settle(self) -> None:
        """Wait for the loads in flight: a process forked after this inherits them decoded."""
        with self.lock:
            running = list(self.inflight.values())
        wait(running)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class ProcessFetcher:
    """A :class:`ShardFetcher` made on first use in each process: a reader or source pickled
    into a data-loader worker, or forked, reopens its origin there instead of sharing one.
    Owners set ``origin``, ``snap``, ``tiers``, ``_fetcher = None`` and ``_pid``."""

    origin: FsspecTier
    snap: Snapshot
    tiers: TierSettings
    _fetcher: ShardFetcher | None
    _pid: int

    @property
    def fetcher(self) -> ShardFetcher:
        if self._fetcher is None or self._pid != os.getpid():
            origin = self.origin if self._pid == os.getpid() else self.origin.reopened()
            inherited = self._fetcher.memory if self._fetcher is not None else {}
            self._fetcher = ShardFetcher(origin, self.snap.shards, self.tiers)
            self._fetcher.memory.update(inherited)  # decoded before a fork: shared, not redone
            self._pid = os.getpid()
        return self._fetcher
