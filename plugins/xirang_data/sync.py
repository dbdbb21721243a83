"""Copy a snapshot between locations, moving only the shards the destination lacks.

Shards are named by their sha256, so what the destination should hold is known by name; what
it does hold is checked by hash, not size: a destination shard whose bytes do not match its
name (a corrupt or truncated copy) is replaced. Every copied shard is checked against its
checksum before it is written (by an atomic rename), and the manifest goes last, so a
destination never lists a shard it does not hold. A token shard's sidecar index
(``shards/<sha256>.index``, checked against the sha256 its manifest entry holds) travels with it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from xirang import DataError
from xirang.data import FsspecTier, Throttle
from xirang_data import shards
from xirang_data.shards import ShardInfo
from xirang_data.snapshot import Snapshot, load, save


@dataclass
class SyncReport:
    """What one sync did."""

    snapshot: str
    moved: int = 0
    moved_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    replaced: int = 0  # destination copies that failed their checksum


def sync(src: FsspecTier, dst: FsspecTier, snapshot_id: str = "", workers: int = 4) -> SyncReport:
    """Copy snapshot ``snapshot_id`` (the latest when empty) from ``src`` to ``dst``."""
    snap = load(src, snapshot_id)
    report = SyncReport(snap.id)
    throttle = Throttle()
    todo: list[ShardInfo] = []
    for info in _objects(snap):
        held = _held(dst, info)
        if held:
            report.skipped += 1
            report.skipped_bytes += info.bytes
        else:
            report.replaced += held is False
            todo.append(info)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for info in pool.map(lambda i: _copy(src, dst, i, throttle), todo):
            report.moved += 1
            report.moved_bytes += info.bytes
    save(dst, snap)
    return report


def _objects(snap: Snapshot) -> list[ShardInfo]:
    """Every object a snapshot names: its shards, quarantine and the shards' sidecar indexes."""
    infos = (*snap.shards, *snap.quarantine)
    return [*infos, *(i.sidecar for i in infos if i.sidecar is not None)]


def _held(dst: FsspecTier, info: ShardInfo) -> bool | None:
    """True: ``dst`` holds the shard intact; False: a corrupt copy; None: nothing there."""
    try:
        return shards.checksum_ok(dst.read(info.key), info)
    except FileNotFoundError:
        return None


def _copy(src: FsspecTier, dst: FsspecTier, info: ShardInfo, throttle: Throttle) -> ShardInfo:
    data = throttle.call(lambda: src.read(info.key))
    if not shards.checksum_ok(data, info):
        raise DataError(f"shard {info.key} at {src.root} fails its checksum; not copied")
    throttle.call(lambda: dst.write(info.key, data))
    return info


def verify(tier: FsspecTier, snapshot_id: str = "") -> tuple[str, list[str]]:
    """Read every shard of a snapshot; returns its id and the keys that are missing or corrupt."""
    snap = load(tier, snapshot_id)
    bad = []
    for info in _objects(snap):
        try:
            ok = shards.checksum_ok(tier.read(info.key), info)
        except FileNotFoundError:
            ok = False
        if not ok:
            bad.append(info.key)
    return snap.id, bad
