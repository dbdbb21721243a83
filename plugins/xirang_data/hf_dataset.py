"""A Hugging Face ``datasets`` dataset saved with ``save_to_disk``, read as a prepare source.

Such a folder holds ``state.json`` (its Arrow files, in order), ``dataset_info.json`` and the
Arrow files themselves (IPC streams). They are read here with pyarrow one record batch at a
time, through fsspec, so any filesystem works, memory holds one batch, and ``datasets`` (a heavy
import) is not needed to read what it wrote. A ``DatasetDict`` (``dataset_dict.json`` and one
folder per split) is refused naming its splits: which split trains is the user's choice.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from xirang import DataError

STATE = "state.json"
DICT = "dataset_dict.json"


def is_saved_dataset(fs: Any, path: str) -> bool:
    """Whether ``path`` is a folder ``save_to_disk`` wrote (a dataset or a dataset dict)."""
    return fs.isdir(path) and any(fs.exists(posixpath.join(path, n)) for n in (STATE, DICT))


def iter_rows(fs: Any, path: str, src: str, field: str) -> Iterator[dict[str, Any]]:
    """Every row of the saved dataset at ``path`` (``src`` as the user wrote it) as a dict."""
    files = data_files(fs, path, src)
    for number, name in enumerate(files):
        with fs.open(posixpath.join(path, name), "rb") as handle:
            reader = pa.ipc.open_stream(handle)
            if number == 0 and field not in reader.schema.names:
                raise DataError(
                    f"--field {field}: dataset {src} has no column {field!r}; its columns: "
                    f"{', '.join(reader.schema.names)} (choose one with --field NAME)"
                )
            for batch in reader:
                yield from batch.to_pylist()


def data_files(fs: Any, path: str, src: str) -> list[str]:
    """The Arrow files of a saved dataset, in its row order, from its ``state.json``."""
    if fs.exists(posixpath.join(path, DICT)):
        splits = json.loads(fs.cat_file(posixpath.join(path, DICT))).get("splits", [])
        choices = " or ".join(f"{src.rstrip('/')}/{s}" for s in splits)
        raise DataError(
            f"SRC {src} is a DatasetDict of splits {', '.join(splits)}; give one split's "
            f"folder: {choices}"
        )
    try:
        state = json.loads(fs.cat_file(posixpath.join(path, STATE)))
        return [entry["filename"] for entry in state["_data_files"]]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        raise DataError(
            f"SRC {src} (--format hf) is not a Hugging Face dataset saved with save_to_disk: "
            f"it needs a readable {STATE} listing its Arrow files"
        ) from None
