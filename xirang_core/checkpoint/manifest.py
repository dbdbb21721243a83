"""The manifest: the commit record of one checkpoint, written last.

A checkpoint exists only once ``step-<N>/manifest.json`` is in place. It lists every file with
its chunk digests and a checksum, holds the small global state (step, learning-rate schedule,
resolved config, dataset snapshot id), and carries a checksum of itself, so a torn or edited
manifest is caught as surely as a corrupt chunk. With a pool key set (:mod:`signing`) it also
carries an HMAC of the same body, which only the key's holders can recompute.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from xirang_core.checkpoint.chunks import CorruptCheckpoint, FileRecord
from xirang_core.checkpoint.signing import SigningKey

#: 2: the step folder is DCP's (``.metadata`` in it, items as objects of the chunk store);
#: 1: DCP's files under ``dcp/``, in xirang's raw format (still read)
FORMAT = 2
READABLE = (1, 2)
MANIFEST_FILE = "manifest.json"
STEP_PREFIX = "step-"


def step_dir(step: int) -> str:
    """Zero-padded so names sort in step order everywhere, object stores included."""
    return f"{STEP_PREFIX}{step:09d}"


def parse_step_dir(name: str) -> int | None:
    """The step of a ``step-<N>`` folder name, or None for anything else."""
    tail = name.rstrip("/").rsplit("/", 1)[-1]
    if not tail.startswith(STEP_PREFIX) or not tail[len(STEP_PREFIX) :].isdigit():
        return None
    return int(tail[len(STEP_PREFIX) :])


@dataclass
class Manifest:
    """What one checkpoint holds and how to check it."""

    step: int
    files: dict[str, FileRecord]
    world_size: int
    bytes_new: int
    trainer: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    dataset_snapshot: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    #: the run that saved it (:func:`xirang_core.checkpoint.manager.run_identity`); signed with
    #: the rest, so a step another run signed with the same key is told apart ("" before it)
    run: str = ""

    @property
    def bytes_total(self) -> int:
        return sum(f.bytes for f in self.files.values())

    def chunks(self) -> set[str]:
        return {d for f in self.files.values() for d in f.chunks}

    def body(self) -> dict[str, Any]:
        return {
            **({"run": self.run} if self.run else {}),
            "format": FORMAT,
            "step": self.step,
            "created": self.created,
            "world_size": self.world_size,
            "bytes_total": self.bytes_total,
            "bytes_new": self.bytes_new,
            "trainer": self.trainer,
            "dataset_snapshot": self.dataset_snapshot,
            "timings": self.timings,
            "files": {name: rec.to_json() for name, rec in sorted(self.files.items())},
            "config": self.config,
        }

    def to_bytes(self, key: SigningKey | None = None) -> bytes:
        """The manifest file: its body, checksum and (with ``key``) signature."""
        body = self.body()
        sealed = {"checksum": _checksum(body)}
        if key is not None:
            sealed["signature"] = key.sign(_canonical(body))
        return json.dumps({**body, **sealed}, indent=1).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str, key: SigningKey | None = None) -> Manifest:
        """Parse and check; a torn, edited or foreign manifest raises CorruptCheckpoint, and
        with ``key`` an unsigned or foreign-signed one raises RefusedCheckpoint."""
        try:
            doc = json.loads(data)
            checksum = doc.pop("checksum")
            signature = doc.pop("signature", None)
        except (ValueError, KeyError, AttributeError, TypeError):
            raise CorruptCheckpoint(f"{where}: manifest is not valid JSON (torn write?)") from None
        if checksum != _checksum(doc):
            raise CorruptCheckpoint(f"{where}: manifest fails its checksum")
        if key is not None:
            key.check(_canonical(doc), signature, where)
        if doc.get("format") not in READABLE:
            raise CorruptCheckpoint(
                f"{where}: manifest format {doc.get('format')}, need one of {READABLE}"
            )
        return cls(
            step=int(doc["step"]),
            files=_files(doc["files"], where),
            world_size=int(doc["world_size"]),
            bytes_new=int(doc["bytes_new"]),
            trainer=doc.get("trainer") or {},
            config=doc.get("config") or {},
            dataset_snapshot=doc.get("dataset_snapshot"),
            timings=doc.get("timings") or {},
            created=doc.get("created", ""),
            run=str(doc.get("run") or ""),
        )


def _files(records: dict[str, Any], where: str) -> dict[str, FileRecord]:
    try:
        return {n: FileRecord.from_json(r) for n, r in records.items()}
    except CorruptCheckpoint as exc:
        raise CorruptCheckpoint(f"{where}: {exc}") from None


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True).encode()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body)).hexdigest()
