"""A checkpoint in flight: the state taken at a step, and how it becomes chunks and a manifest.

Taking the snapshot is the only part that blocks training (a copy out of device memory); the
rest runs on a background thread: DCP serialises the tensors into memory, every rank stores its
files as chunks, rank 0 gathers the file lists and commits the manifest last. Collectives use a
dedicated gloo group so they never interleave with the training loop's.
"""

from __future__ import annotations

import json
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

from xirang_core.checkpoint import dcpmeta
from xirang_core.checkpoint.chunks import (
    CorruptCheckpoint,
    FileRecord,
    RefusedCheckpoint,
    chunk_key,
    is_digest,
)
from xirang_core.checkpoint.manifest import MANIFEST_FILE, Manifest, step_dir
from xirang_core.checkpoint.memfs import MemoryFileSystem, memory_reader, memory_writer
from xirang_core.checkpoint.rawdcp import OBJECT_PREFIX, RAW_SUFFIX
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.errors import XirangError

DCP_PREFIX = "dcp/"
#: fsyncs in flight at once when committing (disks and filesystems serve several at a time)
SYNC_THREADS = 8


class SaveFailed(XirangError):
    """A checkpoint could not be written; the previous one stays the latest."""

    exit_code = 1


def rank_file(rank: int) -> str:
    return f"rank{rank}.json"


RANK_FILE = re.compile(r"rank\d+\.json")


def dcp_names(names: Iterable[str]) -> list[str]:
    """Of a checkpoint's files, DCP's (metadata and items): all but the ranks' own state."""
    names = list(names)
    return [n for n in names if n.startswith(DCP_PREFIX)] or [
        n for n in names if not RANK_FILE.fullmatch(n)
    ]


@dataclass
class Snapshot:
    """Everything one rank saves for one step, already detached from the live training state."""

    step: int
    tensors: dict[str, Any]
    rank_state: dict[str, Any]
    trainer: dict[str, Any]
    stall_s: float = 0.0


@dataclass
class SaveResult:
    """What a committed save reports (the same on every rank)."""

    step: int
    location: str
    bytes_total: int
    bytes_new: int
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Collective:
    """The ranks of a run as the checkpoint code sees them; ``group`` None means one process."""

    rank: int = 0
    world_size: int = 1
    group: Any = None

    @property
    def distributed(self) -> bool:
        return self.group is not None

    def gather(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj: Any) -> Any:
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]


def write_snapshot(
    snap: Snapshot,
    store: CheckpointStore,
    peers: Collective,
    manifest_extra: dict[str, Any],
    retain: Callable[[], Any] | None = None,
    fail_chunk: Callable[[int], None] | None = None,
) -> SaveResult:
    """Serialise, store as chunks, commit; returns on every rank once the commit is decided.
    Raises SaveFailed on every rank when any rank failed, without writing a manifest.

    ``retain`` runs on rank 0 after the commit and before the other ranks are released, so no
    rank can be storing the next checkpoint's chunks while old ones are collected."""
    started = time.perf_counter()
    fs = MemoryFileSystem()
    local: dict[str, Any] = {"files": {}, "new": 0, "error": "", "plain": {}}
    serialised = started
    try:  # reported to every rank below, never left half-committed
        writer = memory_writer(fs, store.chunks, fail_chunk)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.save(
                snap.tensors,
                storage_writer=writer,
                process_group=peers.group,
                no_dist=not peers.distributed,
            )
        serialised = time.perf_counter()
        local["files"] = {n: r.to_json() for n, r in writer.records.items()}
        local["new"] = writer.new
        files = fs.files()
        files[rank_file(peers.rank)] = json.dumps(snap.rank_state).encode()
        for name, data in files.items():
            record, new = store.chunks.put(data, fail_chunk)
            local["files"][name] = record.to_json()
            local["new"] += new
        if dcpmeta.PICKLE_METADATA in files:  # DCP's commit marker, for torch's tools
            local["plain"][dcpmeta.PICKLE_METADATA] = files[dcpmeta.PICKLE_METADATA]
    except (Exception, CheckpointException) as exc:
        local["error"] = _failure(exc, peers.rank)
    stored = time.perf_counter()
    timings = {
        "stall_s": round(snap.stall_s, 4),
        "serialise_s": round(serialised - started, 4),
        "store_s": round(stored - serialised, 4),
    }
    plain = local.pop("plain")
    parts = peers.gather(local)
    outcome = None
    if peers.rank == 0:
        outcome = _commit(snap, store, parts, plain, peers.world_size, manifest_extra, timings)
        if retain is not None and not isinstance(outcome, str):
            _retain_safely(retain)
    outcome = peers.broadcast(outcome)
    if isinstance(outcome, str):
        raise SaveFailed(outcome)
    return outcome


def _failure(exc: BaseException, rank: int) -> str:
    """One line per failed rank (DCP gathers every rank's failure into one exception)."""
    failures = exc.failures if isinstance(exc, CheckpointException) else {rank: (exc, None)}
    return "; ".join(f"rank {r}: {type(e).__name__}: {e}" for r, (e, _) in failures.items())


def _commit(
    snap: Snapshot,
    store: CheckpointStore,
    parts: list[dict[str, Any]],
    plain: dict[str, bytes],
    world_size: int,
    extra: dict[str, Any],
    timings: dict[str, float],
) -> SaveResult | str:
    """Rank 0: write the manifest once every rank stored its files; an error text otherwise.
    ``plain``: files that go into the step folder itself (DCP's ``.metadata``), written just
    before the manifest, so torch's tools find a step folder complete once they see them."""
    errors = [p["error"] for p in parts if p["error"]]
    if errors:
        return f"checkpoint step {snap.step} not committed: {'; '.join(errors)}"
    try:
        files = {n: FileRecord.from_json(r) for p in parts for n, r in p["files"].items()}
        manifest = Manifest(
            step=snap.step,
            files=files,
            world_size=world_size,
            bytes_new=sum(p["new"] for p in parts),
            trainer=snap.trainer,
            timings=timings,
            **extra,
        )
        folder = step_dir(snap.step)
        for name, data in plain.items():
            store.tier.write(f"{folder}/{name}", data)
        synced = time.perf_counter()  # the chunks are on disk before the manifest names them
        keys = {chunk_key(d) for r in files.values() for d in r.chunks}
        _sync(store, keys | {f"{folder}/{name}" for name in plain})
        synced = time.perf_counter() - synced
        location = store.commit(manifest)
        started = time.perf_counter()  # and a commit reported survives power loss
        store.tier.sync([f"{step_dir(snap.step)}/{MANIFEST_FILE}"])
        timings["fsync_s"] = synced + time.perf_counter() - started
    except Exception as exc:
        return f"checkpoint step {snap.step} not committed: {type(exc).__name__}: {exc}"
    return SaveResult(snap.step, location, manifest.bytes_total, manifest.bytes_new, timings)


def _sync(store: CheckpointStore, keys: set[str]) -> None:
    """fsync ``keys`` and their folders, a thread per few folders: a checkpoint is an object
    per tensor, and one fsync after another waits on the disk that many times over."""
    by_folder: dict[str, list[str]] = {}
    for key in keys:
        by_folder.setdefault(key.rpartition("/")[0], []).append(key)
    with ThreadPoolExecutor(SYNC_THREADS) as pool:
        list(pool.map(store.tier.sync, by_folder.values()))


def _retain_safely(retain: Callable[[], Any]) -> None:
    """Retention is housekeeping: a failure is logged, never turned into a failed save."""
    try:
        retain()
    except Exception as exc:
        logging.getLogger("xirang.checkpoint").warning("checkpoint retention failed: %s", exc)


def check_loadable(files: dict[str, Any], where: str) -> Metadata:
    """Refuse, before anything is loaded, a checkpoint that would need unpickling (a
    non-tensor value that torch's weights-only rules refuse, an item that is no object of the
    store nor a raw file of an older xirang, DCP's pickled metadata where xirang never wrote
    one), and one whose metadata names bytes it does not hold (a file missing from the
    manifest, a slice past a file's end): a manifest crafted around such metadata has valid
    checksums and would pass every chunk check. Returns the DCP metadata."""
    prefix = dcp_prefix(files)
    if prefix and any(n.rsplit("/", 1)[-1] == dcpmeta.PICKLE_METADATA for n in files):
        raise dcpmeta.pickle_refusal(where)
    name = prefix + dcpmeta.METADATA_FILE
    if name not in files:
        if prefix + dcpmeta.PICKLE_METADATA in files:
            raise dcpmeta.pickle_refusal(where)
        raise CorruptCheckpoint(f"{where}: no {name}")
    metadata = dcpmeta.from_json(bytes(files[name]), where)
    for index, info in metadata.storage_data.items():
        path = info.relative_path
        if not (path.endswith(RAW_SUFFIX) or _is_object(path)):
            raise RefusedCheckpoint(f"{where}: {path} is not an item xirang wrote")
        data = files.get(prefix + path)
        if data is None or info.offset + info.length > len(data):
            held = "is not in the checkpoint" if data is None else f"holds {len(data)} bytes"
            raise CorruptCheckpoint(
                f"{where}: {index.fqn} is stored at bytes {info.offset}+{info.length} of "
                f"{path}, which {held}"
            )
        if isinstance(metadata.state_dict_metadata.get(index.fqn), BytesStorageMetadata):
            dcpmeta.safe_value(_piece(data, info.offset, info.length), f"{where} {index.fqn}")
    return metadata


def dcp_prefix(files: dict[str, Any]) -> str:
    """Where a checkpoint's DCP files are among its files: ``dcp/`` in checkpoints written
    before the step folder itself was DCP's, the step folder (``""``) since."""
    return DCP_PREFIX if DCP_PREFIX + dcpmeta.METADATA_FILE in files else ""


def _is_object(path: str) -> bool:
    """``../chunks/ab/<digest>``: an item stored as one object of the chunk store."""
    digest = path.rpartition("/")[2]
    return is_digest(digest) and path == OBJECT_PREFIX + chunk_key(digest)


def _piece(data: Any, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` of a stored file (chunked, or plain bytes)."""
    if hasattr(data, "read"):
        return data.read(offset, length)
    return bytes(data[offset : offset + length])


def dcp_metadata(files: dict[str, Any]) -> Metadata:
    """DCP's metadata of a checkpoint (names, shapes, dtypes of every stored tensor)."""
    return memory_reader(dcp_filesystem(files)).read_metadata()


def dcp_filesystem(files: dict[str, Any]) -> MemoryFileSystem:
    """A checkpoint's DCP files as DCP's reader finds them (paths from DCP's folder)."""
    prefix = dcp_prefix(files)
    return MemoryFileSystem({n[len(prefix) :]: d for n, d in files.items() if n.startswith(prefix)})


def load_tensors(
    files: dict[str, Any], template: dict[str, Any], peers: Collective
) -> dict[str, Any]:
    """Fill ``template`` (this rank's state-dict layout) from a checkpoint's DCP files; DCP
    reshards when the checkpoint was written by another world size or strategy."""
    fs = dcp_filesystem(files)
    check_layout(memory_reader(fs).read_metadata(), template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(
            template,
            storage_reader=memory_reader(fs),
            process_group=peers.group,
            no_dist=not peers.distributed,
        )
    return template


#: how many names a layout error lists before saying how many more there are
_SHOWN = 6


def check_layout(metadata: Metadata, template: dict[str, Any]) -> None:
    """Refuse, as one error naming both layouts, a checkpoint that lacks values this run's
    model and optimizer need (another model's names, another optimizer's param groups),
    where DCP would raise a traceback about one missing key."""
    wanted, _ = flatten_state_dict(template)
    stored = metadata.state_dict_metadata
    missing = sorted(set(wanted) - set(stored))
    if not missing:
        return
    extra = sorted(set(stored) - set(wanted))
    raise XirangError(
        f"the checkpoint does not fit this run: this run's model and optimizer need "
        f"{_names(missing)}, which it lacks; it holds {_names(extra) if extra else 'nothing else'}"
        f" (the checkpoint: {_layout(stored)}; this run: {_layout(wanted)}). Import the source "
        f"again for this run's model (xirang ckpt import FOLDER RUN --model family=... brings "
        f"names and optimizer groups to it; --model-only takes the weights alone)"
    )


def _names(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def _layout(keys: Iterable[str]) -> str:
    """A layout in a few words: how many model tensors and optimizer param groups."""
    keys = list(keys)
    model = sum(k.startswith("model.") for k in keys)
    groups = {k.split(".")[2] for k in keys if k.startswith("optim.param_groups.")}
    return f"{model} model tensors, {len(groups)} optimizer param groups"
