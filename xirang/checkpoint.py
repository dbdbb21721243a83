"""What a checkpoint tool uses (``xirang ckpt``, ``xirang drill``, a converter of its own): a
run's checkpoint store and where it lives, the manifest of one checkpoint and the errors that
refuse one, the DCP files of a checkpoint read in memory without unpickling anything, and the
snapshot writer that commits tensors as a checkpoint.

``dcpmeta`` is the kernel module itself (DCP's metadata as JSON, its file names). The names in
``__all__`` are the stable surface for checkpoint tools. Importing this module imports torch.
"""

from xirang_core.checkpoint import dcpmeta
from xirang_core.checkpoint.chunks import CorruptCheckpoint, RefusedCheckpoint
from xirang_core.checkpoint.config import CheckpointConfig
from xirang_core.checkpoint.manifest import Manifest
from xirang_core.checkpoint.memfs import MemoryFileSystem, memory_reader
from xirang_core.checkpoint.snapshot import (
    Collective,
    SaveResult,
    Snapshot,
    check_loadable,
    dcp_filesystem,
    dcp_names,
    write_snapshot,
)
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.checkpoint.tiers import checkpoint_uri, open_tier

__all__ = [
    "CheckpointConfig",
    "CheckpointStore",
    "Collective",
    "CorruptCheckpoint",
    "Manifest",
    "MemoryFileSystem",
    "RefusedCheckpoint",
    "SaveResult",
    "Snapshot",
    "check_loadable",
    "checkpoint_uri",
    "dcp_filesystem",
    "dcp_names",
    "dcpmeta",
    "memory_reader",
    "open_tier",
    "write_snapshot",
]
