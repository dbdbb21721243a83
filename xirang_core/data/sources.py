"""Where ``xirang data prepare`` reads samples from: a folder or fsspec URL of files.

Each file is read by its kind: ``.jsonl`` gives one sample per line, ``.parquet`` one per row,
any other file is one sample (its text), or one per line with ``--format lines``. A folder that
a Hugging Face ``datasets`` dataset was saved to (``save_to_disk``) gives one sample per row
(``--format hf``, found by itself with ``auto``). Files are read by
a pool of threads, in a fixed (sorted) order, so the shards a prepare writes depend only on the
bytes of the source.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec

from xirang_core.data import hf_dataset
from xirang_core.errors import DataError

FORMATS = ("auto", "files", "lines", "jsonl", "parquet", "hf")
READ_AHEAD = 64


def list_files(src: str) -> tuple[Any, list[str]]:
    """The filesystem of ``src`` and its files (itself, or everything below it), sorted."""
    fs, path = fsspec.core.url_to_fs(src)
    if not fs.exists(path):
        raise DataError(f"source {src} does not exist")
    files = [path] if fs.isfile(path) else sorted(fs.find(path))
    files = [f for f in files if not f.rsplit("/", 1)[-1].startswith(".")]
    if not files:
        raise DataError(f"source {src} holds no files")
    return fs, files


def iter_samples(
    src: str, fmt: str = "auto", field: str = "text", threads: int = 8
) -> Iterator[dict[str, Any]]:
    """Every sample of ``src`` as a dict; text that is not UTF-8 stays ``bytes`` for the gate."""
    if fmt not in FORMATS:
        raise DataError(f"--format {fmt}: unknown. Valid: {', '.join(FORMATS)}")
    fs, path = fsspec.core.url_to_fs(src)
    if fmt == "hf" or (fmt == "auto" and hf_dataset.is_saved_dataset(fs, path)):
        yield from hf_dataset.iter_rows(fs, path, src, field)
        return
    fs, files = list_files(src)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for start in range(0, len(files), READ_AHEAD * threads):
            chunk = files[start : start + READ_AHEAD * threads]
            for path, data in zip(chunk, pool.map(fs.cat_file, chunk), strict=True):
                yield from parse(path, data, fmt, field)


def parse(path: str, data: bytes, fmt: str, field: str) -> Iterator[dict[str, Any]]:
    """The samples in one file's bytes."""
    kind = fmt if fmt != "auto" else _kind_of(path)
    if kind == "jsonl":
        yield from _jsonl(path, data, field)
    elif kind == "parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(io.BytesIO(data)).to_pylist()
    elif kind == "lines":
        for line in data.splitlines():
            yield {field: _text(line)}
    else:
        yield {field: _text(data), "source": path.rsplit("/", 1)[-1]}


def _kind_of(path: str) -> str:
    if path.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return "parquet" if path.endswith(".parquet") else "files"


def _jsonl(path: str, data: bytes, field: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = {field: _text(line), "_error": f"line {number} of {path} is not JSON"}
        yield row if isinstance(row, dict) else {field: row}


def _text(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data
