"""The checkpoints of one run in a storage tier: list, read, verify, commit, retain.

Layout under the checkpoint root (a folder or an object-store prefix)::

    chunks/ab/ab12...        content-addressed chunks, shared by every checkpoint; each DCP
                             item (a tensor's torch.save archive) is one
    step-000000100/
      .metadata              DCP's metadata (items at ../chunks/...), so torch reads the folder
      manifest.json          the commit marker, written last
      KEEP                   present when the checkpoint is marked to keep
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from xirang_core.checkpoint.chunks import (
    ChunkedBytes,
    ChunkStore,
    CorruptCheckpoint,
    RefusedCheckpoint,
)
from xirang_core.checkpoint.dcpmeta import PICKLE_METADATA
from xirang_core.checkpoint.manifest import MANIFEST_FILE, Manifest, parse_step_dir, step_dir
from xirang_core.checkpoint.signing import signing_key
from xirang_core.storage.tier import FsspecTier

log = logging.getLogger("xirang.checkpoint")
KEEP_FILE = "KEEP"


@dataclass
class Candidate:
    """A step folder and what is wrong with it, if anything (``problem`` is empty when valid);
    ``refused``: intact but not to be loaded (unsigned under a key, foreign key)."""

    step: int
    manifest: Manifest | None
    problem: str = ""
    refused: bool = False
    #: False for a folder whose save never wrote its manifest (a crash while saving)
    committed: bool = True
    #: a DCP checkpoint xirang did not write (ForeignCheckpoint): never deleted as torn
    foreign: bool = False


class UncommittedCheckpoint(CorruptCheckpoint):
    """A step folder without a manifest: its save never finished, so it was never a
    checkpoint (unlike a committed one that fails its checks)."""


class ForeignCheckpoint(RefusedCheckpoint):
    """A step folder holding a DCP checkpoint that xirang did not write (torch's, torchtitan's):
    complete, not torn, but without xirang's manifest; ``xirang ckpt import`` brings it in."""


class CheckpointStore:
    """One run's checkpoints in ``tier``, signed and checked with the environment's key."""

    def __init__(self, tier: FsspecTier, chunk_bytes: int = 4 << 20) -> None:
        self.tier = tier
        self.chunks = ChunkStore(tier, chunk_bytes)
        self.key = signing_key()

    @classmethod
    def at(cls, uri: str, chunk_bytes: int = 4 << 20, tier: FsspecTier | None = None) -> Any:
        """The store at a path or URL (``/runs/x/checkpoints``, ``s3://bucket/run``)."""
        if tier is None:
            fs, root = fsspec.core.url_to_fs(uri)
            tier = FsspecTier(fs, root)
        return cls(tier, chunk_bytes)

    # --- reading ---------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Every step folder, committed or not, oldest first."""
        fs, root = self.tier.fs, self.tier.root
        if not fs.exists(root):
            return []
        found = (parse_step_dir(p) for p in fs.ls(root, detail=False))
        return sorted(s for s in found if s is not None)

    def manifest(self, step: int, signed: bool = True) -> Manifest:
        """The committed manifest of ``step``; CorruptCheckpoint when missing, torn or edited,
        RefusedCheckpoint when a key is set and it is not signed by it (``signed`` False:
        housekeeping that loads nothing, and skips that check)."""
        key = f"{step_dir(step)}/{MANIFEST_FILE}"
        if not self.tier.exists(key):
            self._refuse_foreign(step)
            raise UncommittedCheckpoint(f"step {step}: no manifest (save never committed: torn)")
        where = f"step {step}"
        manifest = Manifest.from_bytes(self.tier.read(key), where, self.key if signed else None)
        if manifest.step != step:  # its checksum and signature hold: it was moved, not torn
            raise RefusedCheckpoint(
                f"{where}: its manifest is the one of step {manifest.step}, copied into another "
                f"step's folder; refused (it would resume from older weights under a newer step)"
            )
        return manifest

    def _refuse_foreign(self, step: int) -> None:
        """A folder with DCP's ``.metadata`` and DCP's own data files (``*.distcp``) but no
        manifest: torch's or torchtitan's. xirang keeps a step's tensors in ``chunks/``, never
        in ``.distcp`` files, and writes its ``.metadata`` just before the manifest: a save
        killed between the two (a preemption) leaves a ``.metadata`` alone, which is torn."""
        folder = self._folder(step)
        data = [key for key in self.tier.list(folder) if key.endswith(".distcp")]
        if data and self.tier.exists(f"{folder}/{PICKLE_METADATA}"):
            raise ForeignCheckpoint(
                f"step {step}: {self.tier.path(folder)} is a DCP checkpoint without xirang's "
                f"manifest (torch's or torchtitan's); bring it in with: xirang ckpt import "
                f"{self.tier.path(folder)} <run dir>"
            )

    def _folder(self, step: int) -> str:
        """The folder of ``step`` as it is named here (``step-000000100``, or torchtitan's
        ``step-100``)."""
        fs, root = self.tier.fs, self.tier.root
        names = fs.ls(root, detail=False) if fs.exists(root) else []
        found = (n.rstrip("/").rsplit("/", 1)[-1] for n in names if parse_step_dir(n) == step)
        return next(found, step_dir(step))

    def candidates(self, signed: bool = True) -> Iterator[Candidate]:
        """Step folders newest first, each with its manifest or the reason it has none."""
        for step in reversed(self.steps()):
            try:
                yield Candidate(step, self.manifest(step, signed))
            except CorruptCheckpoint as exc:
                refused = isinstance(exc, RefusedCheckpoint)
                committed = not isinstance(exc, UncommittedCheckpoint)
                foreign = isinstance(exc, ForeignCheckpoint)
                yield Candidate(step, None, str(exc), refused, committed, foreign)

    def verify(self, manifest: Manifest) -> None:
        """Read every chunk of every file and check it; raises CorruptCheckpoint."""
        for name, record in manifest.files.items():
            self.chunks.verify(f"step {manifest.step} {name}", record)

    def verify_dcp_folder(self, manifest: Manifest) -> None:
        """The step folder's DCP metadata (what torch's tools read, xirang never does) is the
        manifest's copy; raises CorruptCheckpoint."""
        if PICKLE_METADATA in manifest.files:
            key = f"{step_dir(manifest.step)}/{PICKLE_METADATA}"
            plain = self.tier.read(key) if self.tier.exists(key) else None
            if plain != bytes(self.read_files(manifest, [PICKLE_METADATA])[PICKLE_METADATA]):
                raise CorruptCheckpoint(
                    f"step {manifest.step}: {PICKLE_METADATA} in its folder is "
                    f"{'missing' if plain is None else 'not the one its manifest lists'}: "
                    f"torch's FileSystemReader would not read this checkpoint"
                )

    def read_files(
        self, manifest: Manifest, names: list[str] | None = None
    ) -> dict[str, ChunkedBytes]:
        """Verified bytes of the checkpoint's files (all, or ``names``)."""
        wanted = manifest.files if names is None else {n: manifest.files[n] for n in names}
        where = f"step {manifest.step} "
        found = self.chunks.get_all({where + n: r for n, r in wanted.items()})
        return {n: found[where + n] for n in wanted}

    def is_kept(self, step: int) -> bool:
        return self.tier.exists(f"{step_dir(step)}/{KEEP_FILE}")

    # --- writing ---------------------------------------------------------------------------

    def commit(self, manifest: Manifest) -> str:
        """Write the manifest, the last act of a save; returns the checkpoint's location."""
        data = manifest.to_bytes(self.key)
        self.tier.write(f"{step_dir(manifest.step)}/{MANIFEST_FILE}", data)
        return self.tier.path(step_dir(manifest.step))

    def mark(self, step: int, keep: bool = True) -> None:
        """Exempt ``step`` from retention (or lift that)."""
        self.manifest(step, signed=False)  # refuse to mark what is not a committed checkpoint
        key = f"{step_dir(step)}/{KEEP_FILE}"
        if keep:
            self.tier.write(key, b"kept\n")
        else:
            self.tier.evict(key)

    def retain(self, keep_last: int, keep_every: int = 0) -> list[int]:
        """Delete committed checkpoints beyond the newest ``keep_last`` (except kept ones and
        multiples of ``keep_every``), torn folders older than the newest commit, and chunks
        nothing references any more. Returns the steps deleted. Signatures are not checked:
        retention loads nothing, and must not take a checkpoint under another key for torn."""
        committed: list[tuple[int, Manifest]] = []
        torn: list[int] = []
        for cand in self.candidates(signed=False):
            if cand.manifest is not None:
                committed.append((cand.step, cand.manifest))
            elif not cand.foreign:  # not ours to delete
                torn.append(cand.step)
        newest = committed[0][0] if committed else None
        doomed = [
            step
            for step, _ in committed[keep_last:]
            if not self.is_kept(step) and not (keep_every and step % keep_every == 0)
        ]
        doomed += [step for step in torn if newest is not None and step < newest]
        for step in doomed:
            self.tier.evict(step_dir(step))
        if doomed:
            live = set().union(*(m.chunks() for step, m in committed if step not in doomed))
            removed = self.chunks.collect_garbage(live)
            log.debug("retention removed steps %s and %d chunks", doomed, removed)
        return doomed
