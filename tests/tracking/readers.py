"""Each tracker's output read back with the tool's own reader: TensorBoard's EventAccumulator,
the MlflowClient against its store, and the records of W&B's offline ``.wandb`` files."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: W&B's offline run file: LevelDB's log format (32 KiB blocks of checksummed fragments) after
#: a 7-byte header of its own; each whole record is a ``wandb_internal_pb2.Record``
WANDB_BLOCK, WANDB_HEADER = 32768, struct.Struct("<4sHB")
FULL, LAST = 1, 4


def tensorboard_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def mlflow_runs(uri: str, run_dir: Path) -> list[Any]:
    """The MLflow runs the training run in ``run_dir`` logged (every experiment)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, f"tags.`xirang.run_dir` = '{run_dir}'")


def wandb_records(path: Path) -> Iterator[Any]:
    """Every record of one ``.wandb`` file, parsed with wandb's own protobuf classes."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, _magic, _version = WANDB_HEADER.unpack_from(data)
    assert ident == b":W&B", ident
    pos, pending = WANDB_HEADER.size, b""
    while pos + 7 <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:  # a block's tail too short for a fragment header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def wandb_history(path: Path) -> list[dict[str, Any]]:
    """The logged rows (``run.log``) of one offline run file, keys to decoded values."""
    rows = []
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return rows


def wandb_run_ids(path: Path) -> set[str]:
    return {r.run.run_id for r in wandb_records(path) if r.WhichOneof("record_type") == "run"}
