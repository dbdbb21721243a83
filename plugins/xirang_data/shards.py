"""The shard format: an Arrow IPC file of zstd-compressed record batches, named by its content.

Arrow IPC keeps columns contiguous, so a reader decodes a whole record batch at once and slices
batches of samples out of it with no per-sample parsing (the cost that dominates readers that
seek per sample). A shard's key is ``shards/<sha256>.arrow``: identical bytes share one name,
which makes snapshots immutable and lets sync skip what a destination already holds.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from xirang import DataError

ROWS_PER_BATCH = 1024
SHARD_KEY = re.compile(r"^(shards|quarantine)/[0-9a-f]{64}\.arrow$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: a shard's sidecar index (shard_index.py) sits beside it: ``shards/<sha256>.index``
INDEX_SUFFIX = ".index"


@dataclass(frozen=True)
class ShardInfo:
    """What an index says about one shard: where it is, how many samples, and its checksum."""

    key: str
    samples: int
    bytes: int
    sha256: str
    batch_rows: tuple[int, ...]  # first row of every record batch, for range reads
    #: size and sha256 of the shard's sidecar index (token shards written since it exists):
    #: a resume's first rows are read by range, each range checked against a hash it lists
    index_bytes: int = 0
    index_sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        raw = {
            "key": self.key,
            "samples": self.samples,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "batch_rows": list(self.batch_rows),
        }
        if self.index_sha256:  # absent from older manifests, whose ids stay what they were
            raw.update(index_bytes=self.index_bytes, index_sha256=self.index_sha256)
        return raw

    @property
    def sidecar(self) -> ShardInfo | None:
        """The sidecar index as an object of its own (key, size, sha256), if there is one."""
        if not self.index_sha256:
            return None
        key = self.key.removesuffix(".arrow") + INDEX_SUFFIX
        return ShardInfo(key, 0, self.index_bytes, self.index_sha256, ())

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ShardInfo:
        """Parse an index entry, refusing any key that could point outside the dataset root."""
        key = str(raw.get("key", ""))
        if not SHARD_KEY.match(key):
            raise DataError(
                f"index entry {key!r} is not a shard key of this dataset "
                "(expected shards/<sha256>.arrow); refusing a path outside the dataset root"
            )
        index_sha256 = str(raw.get("index_sha256", ""))
        if index_sha256 and not SHA256.match(index_sha256):
            raise DataError(f"index entry {key}: index_sha256 {index_sha256!r} is not a sha256")
        return cls(
            key=key,
            samples=int(raw["samples"]),
            bytes=int(raw["bytes"]),
            sha256=str(raw["sha256"]),
            batch_rows=tuple(int(r) for r in raw.get("batch_rows", (0,))),
            index_bytes=int(raw.get("index_bytes", 0)),
            index_sha256=index_sha256,
        )


def encode(
    table: pa.Table,
    folder: str = "shards",
    compression: str | None = "zstd",
    batch_rows: list[int] | None = None,
) -> tuple[bytes, ShardInfo]:
    """Serialise ``table`` as a shard (zstd, or uncompressed with ``compression=None``) of
    record batches starting at rows ``batch_rows`` (default: every ``ROWS_PER_BATCH``);
    returns its bytes and its index entry."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    starts = batch_rows or list(range(0, max(table.num_rows, 1), ROWS_PER_BATCH))
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        for start, end in zip(starts, [*starts[1:], max(table.num_rows, 1)], strict=True):
            writer.write_table(table.slice(start, end - start))
    data = sink.getvalue().to_pybytes()
    digest = hashlib.sha256(data).hexdigest()
    info = ShardInfo(f"{folder}/{digest}.arrow", table.num_rows, len(data), digest, tuple(starts))
    return data, info


def decode(data: bytes, key: str = "shard") -> pa.Table:
    """The samples of one shard as a table (columns stay contiguous; nothing is copied per row)."""
    try:
        # one contiguous chunk per column: a take then costs microseconds, not a concatenation
        return pa.ipc.open_file(pa.py_buffer(data)).read_all().combine_chunks()
    except pa.ArrowInvalid as exc:
        raise DataError(f"shard {key} is not a readable Arrow file: {exc}") from None


def checksum_ok(data: bytes, info: ShardInfo) -> bool:
    """True when ``data`` is exactly the shard the index names (size and sha256)."""
    return len(data) == info.bytes and hashlib.sha256(data).hexdigest() == info.sha256
