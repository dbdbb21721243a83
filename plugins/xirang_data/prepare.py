"""``xirang data prepare``: many small inputs in, few large checked shards and a snapshot out.

The main thread reads samples in source order and runs the quality gate (de-duplication needs
one view of everything); each full shard is then encoded, zstd-compressed, hashed and written by
a pool of workers (Arrow's compression releases the GIL), with at most two shards per worker in
flight so memory stays bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from xirang import DataError
from xirang.data import FsspecTier
from xirang_data import shards
from xirang_data.quality import Gate, Report, Rules, content_bytes, quarantine_row
from xirang_data.snapshot import Snapshot, save


@dataclass(frozen=True)
class PrepareSettings:
    """How to cut shards: by uncompressed bytes, with a cap on samples per shard."""

    shard_bytes: int = 32 * 2**20
    shard_samples: int = 65536
    workers: int = 2
    progress: bool = True


def prepare(
    samples: Iterable[dict[str, Any]],
    dst: FsspecTier,
    rules: Rules,
    settings: PrepareSettings,
    meta: dict[str, Any],
) -> tuple[Snapshot, Report]:
    """Pack ``samples`` into shards under ``dst``; returns the saved snapshot and its report."""
    report = Report()
    gate = Gate(rules)
    rejected: list[dict[str, Any]] = []
    writer = _ShardWriter(dst, settings.workers)
    with writer, _progress(settings.progress) as tick:
        for chunk in _chunks(samples, gate, report, rejected, rules.field, settings):
            writer.submit(chunk)
            tick(len(chunk))
    if not writer.infos:
        raise DataError(
            f"no sample passed the quality gate ({report.quarantined} quarantined: "
            f"{dict(report.reasons)}); nothing to train on"
        )
    quarantine = _write_quarantine(dst, rejected)
    assert writer.schema is not None  # set by the first chunk, and a sample passed
    schema = {f.name: str(f.type) for f in writer.schema}
    meta = {**meta, "created": time.time(), "report": report.as_dict(), "rules": asdict(rules)}
    snap = Snapshot(schema, tuple(writer.infos), quarantine, meta)
    save(dst, snap)
    return snap, report


def _chunks(
    samples: Iterable[dict[str, Any]],
    gate: Gate,
    report: Report,
    rejected: list[dict[str, Any]],
    key: str,
    settings: PrepareSettings,
) -> Iterator[list[dict[str, Any]]]:
    """Accepted samples grouped into shard-sized lists; the rest land in ``rejected``."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for sample in samples:
        reason = gate.reason(sample)
        if reason:
            report.add(reason, sample, key)
            rejected.append(quarantine_row(sample, reason, key))
            continue
        report.accepted += 1
        chunk.append(sample)
        size += len(content_bytes(sample[key]))
        if size >= settings.shard_bytes or len(chunk) >= settings.shard_samples:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class _ShardWriter:
    """Turns lists of samples into shards on a pool of threads, keeping their order."""

    def __init__(self, dst: FsspecTier, workers: int) -> None:
        self.dst, self.workers = dst, max(1, workers)
        self.pool = ThreadPoolExecutor(max_workers=self.workers)
        self.pending: list[Future[shards.ShardInfo]] = []
        self.infos: list[shards.ShardInfo] = []
        self.schema: pa.Schema | None = None

    def submit(self, rows: list[dict[str, Any]]) -> None:
        table = self._table(rows)
        self.pending.append(self.pool.submit(write_shard, self.dst, table, "shards"))
        while len(self.pending) > 2 * self.workers:
            self.infos.append(self.pending.pop(0).result())

    def _table(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Rows as a table of the first shard's schema, so every shard has the same columns."""
        try:
            table = pa.Table.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DataError(
                f"samples do not share one schema ({self.schema}): {exc}. Give every sample the "
                "same fields and types"
            ) from None
        self.schema = self.schema or table.schema
        return table

    def __enter__(self) -> _ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.infos.extend(f.result() for f in self.pending)
        finally:
            self.pool.shutdown(wait=True)


def write_shard(dst: FsspecTier, table: pa.Table, folder: str) -> shards.ShardInfo:
    """Encode and store one shard unless identical bytes are already there."""
    data, info = shards.encode(table, folder)
    write_shard_bytes(dst, data, info)
    return info


def write_shard_bytes(dst: FsspecTier, data: bytes, info: shards.ShardInfo) -> None:
    """Store an encoded shard (atomically, by the tier's rename) unless it is already there."""
    if not (dst.exists(info.key) and dst.size(info.key) == info.bytes):
        dst.write(info.key, data)


def _write_quarantine(dst: FsspecTier, rows: list[dict[str, Any]]) -> tuple[shards.ShardInfo, ...]:
    if not rows:
        return ()
    return (write_shard(dst, pa.Table.from_pylist(rows), "quarantine"),)


@contextmanager
def _progress(show: bool) -> Iterator[Any]:
    if not show:
        yield lambda n: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (
        SpinnerColumn(),
        TextColumn("packing {task.completed:,} samples"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as progress:
        task = progress.add_task("prepare", total=None)
        yield lambda n: progress.advance(task, n)
