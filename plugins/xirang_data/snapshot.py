"""Snapshots: an immutable, content-addressed list of shards that a run can name exactly.

A dataset root holds ``shards/<sha256>.arrow``, ``quarantine/<sha256>.arrow`` and
``snapshots/<id>.json``; a token snapshot's shards also have ``shards/<sha256>.index``, their
sidecar indexes (checksums in the shard entries). The id is a hash of the manifest's content
(schema, shards, their checksums), so two prepares of the same bytes give the same id, and a
manifest that was edited no longer matches its own name and is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xirang import DataError
from xirang.data import FsspecTier
from xirang_data.shards import ShardInfo

SNAPSHOT_DIR = "snapshots"
ID_LENGTH = 16
SNAPSHOT_ID = re.compile(rf"^[0-9a-f]{{{ID_LENGTH}}}$")


@dataclass(frozen=True)
class Snapshot:
    """One prepared version of a dataset: its shards, quarantine and prepare report."""

    schema: dict[str, str]
    shards: tuple[ShardInfo, ...]
    quarantine: tuple[ShardInfo, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)  # source, created, report: not hashed
    #: what a derived snapshot was made from and how (token shards: source id, tokenizer and
    #: its fingerprint); hashed, so a derived snapshot's id names its recipe too
    lineage: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        content = json.dumps(self._content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(content.encode()).hexdigest()[:ID_LENGTH]

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def _content(self) -> dict[str, Any]:
        content = {
            "schema": self.schema,
            "shards": [s.as_dict() for s in self.shards],
            "quarantine": [s.as_dict() for s in self.quarantine],
        }
        return {**content, "lineage": self.lineage} if self.lineage else content

    def to_json(self) -> str:
        return json.dumps({"id": self.id, **self._content(), "meta": self.meta}, indent=1)

    @classmethod
    def from_json(cls, text: str, name: str = "manifest") -> Snapshot:
        """Parse and check a manifest: shard keys inside the root, id matching the content."""
        try:
            raw = json.loads(text)
            snap = cls(
                schema=dict(raw["schema"]),
                shards=tuple(ShardInfo.from_dict(s) for s in raw["shards"]),
                quarantine=tuple(ShardInfo.from_dict(s) for s in raw.get("quarantine", [])),
                meta=dict(raw.get("meta", {})),
                lineage=dict(raw.get("lineage", {})),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{name} is not a snapshot manifest: {exc}") from None
        if raw.get("id") != snap.id:
            raise DataError(
                f"{name}: manifest content hashes to {snap.id}, not its recorded id "
                f"{raw.get('id')}; it was modified after prepare and is refused"
            )
        return snap


def save(tier: FsspecTier, snap: Snapshot) -> str:
    """Write the manifest (shards must already be there); returns the snapshot id."""
    tier.write(f"{SNAPSHOT_DIR}/{snap.id}.json", snap.to_json().encode())
    return snap.id


def list_ids(tier: FsspecTier) -> list[str]:
    """Snapshot ids under the tier's root, oldest first by the time they were prepared."""
    ids = [
        k.rsplit("/", 1)[-1][: -len(".json")]
        for k in tier.list(SNAPSHOT_DIR)
        if k.endswith(".json") and SNAPSHOT_ID.match(k.rsplit("/", 1)[-1][: -len(".json")])
    ]
    snaps = [load(tier, i) for i in ids]
    return [s.id for s in sorted(snaps, key=lambda s: (s.meta.get("created", 0), s.id))]


def no_snapshot(root: str) -> str:
    """What to do about a dataset root with no snapshot: a text file named where a prepared
    root belongs (``data.val=notes.txt``) is prepared into a folder beside it, a command that
    works as pasted; a folder is the destination of a prepare from the user's source."""
    given = Path(root.removeprefix("file://")).expanduser()
    if given.is_file():
        prepared = given.with_name(f"{given.stem}-prepared")
        return (
            f"{root} is a file, not a prepared dataset root; prepare it with `xirang data "
            f"prepare {given} {prepared}`, then name {prepared} where you named the file"
        )
    return (
        f"{root} holds no snapshot; create one with `xirang data prepare <your text folder or "
        f"file> {root}`"
    )


def load(tier: FsspecTier, snapshot_id: str = "") -> Snapshot:
    """The snapshot ``snapshot_id`` (the latest one when empty); a clear error when absent."""
    if not snapshot_id:
        ids = list_ids(tier)
        if not ids:
            raise DataError(no_snapshot(tier.root))
        snapshot_id = ids[-1]
    if not SNAPSHOT_ID.match(snapshot_id):
        raise DataError(f"data.snapshot={snapshot_id!r} is not a snapshot id ({ID_LENGTH} hex)")
    key = f"{SNAPSHOT_DIR}/{snapshot_id}.json"
    if not tier.exists(key):
        raise DataError(
            f"snapshot {snapshot_id} is not in {tier.root}; `xirang data snapshots {tier.root}` "
            "lists the ones there"
        )
    snap = Snapshot.from_json(tier.read(key).decode(), f"snapshot {snapshot_id}")
    if snap.id != snapshot_id:
        raise DataError(
            f"{tier.path(key)} holds the manifest of snapshot {snap.id}, not {snapshot_id}: a "
            "snapshot file's name must be its content id. Restore the file (`xirang data sync` "
            "from a good copy) or remove it"
        )
    return snap
