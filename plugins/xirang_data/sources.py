"""Where ``xirang data prepare`` reads samples from: a folder or fsspec URL of files.

Each file is read by its kind: ``.jsonl`` gives one sample per line, ``.parquet`` one per row,
any other file is one sample (its text), or one per line with ``--format lines``. A folder that
a Hugging Face ``datasets`` dataset was saved to (``save_to_disk``) gives one sample per row
(``--format hf``, found by itself with ``auto``). Files are read by
a pool of threads, in a fixed (sorted) order, so the shards a prepare writes depend only on the
bytes of the source.
"""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec

from xirang import DataError
from xirang_data import hf_dataset

FORMATS = ("auto", "files", "lines", "jsonl", "parquet", "hf")
#: what a byte the encoding cannot decode does: quarantines its sample, becomes U+FFFD, or goes
ERRORS = ("strict", "replace", "ignore")
READ_AHEAD = 64


@dataclass(frozen=True)
class Decoding:
    """How text files' bytes become text (``--encoding``, ``--errors``). A leading byte-order
    mark is never text: it is dropped."""

    encoding: str = "utf-8"
    errors: str = "strict"

    def check(self) -> None:
        """A DataError naming the valid values, before any file is read."""
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise DataError(
                f"--encoding {self.encoding}: not an encoding Python knows (e.g. utf-8, "
                f"utf-16, latin-1, cp1252)"
            ) from None
        if self.errors not in ERRORS:
            raise DataError(f"--errors {self.errors}: unknown. Valid: {', '.join(ERRORS)}")

    def text(self, data: bytes) -> str | bytes:
        """The text of ``data``; its bytes unchanged when they do not decode (strict), so the
        gate quarantines the sample as ``not_utf8``."""
        try:
            return data.decode(self.encoding, self.errors).removeprefix(BOM)
        except UnicodeDecodeError:
            return data


BOM = "\ufeff"


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
    src: str,
    fmt: str = "auto",
    field: str = "text",
    threads: int = 8,
    decoding: Decoding = Decoding(),
) -> Iterator[dict[str, Any]]:
    """Every sample of ``src`` as a dict; text that does not decode stays ``bytes`` for the
    gate."""
    if fmt not in FORMATS:
        raise DataError(f"--format {fmt}: unknown. Valid: {', '.join(FORMATS)}")
    decoding.check()
    fs, path = fsspec.core.url_to_fs(src)
    if fmt == "hf" or (fmt == "auto" and hf_dataset.is_saved_dataset(fs, path)):
        yield from hf_dataset.iter_rows(fs, path, src, field)
        return
    fs, files = list_files(src)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for start in range(0, len(files), READ_AHEAD * threads):
            chunk = files[start : start + READ_AHEAD * threads]
            for path, data in zip(chunk, pool.map(fs.cat_file, chunk), strict=True):
                yield from parse(path, data, fmt, field, decoding)


def parse(
    path: str, data: bytes, fmt: str, field: str, decoding: Decoding = Decoding()
) -> Iterator[dict[str, Any]]:
    """The samples in one file's bytes."""
    kind = fmt if fmt != "auto" else _kind_of(path)
    if kind == "jsonl":
        yield from _jsonl(path, data.removeprefix(codecs.BOM_UTF8), field, decoding)
    elif kind == "parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(io.BytesIO(data)).to_pylist()
    elif kind == "lines":
        text = decoding.text(data)  # whole: a multi-byte encoding's lines are not byte lines
        for line in text.splitlines() if isinstance(text, str) else data.splitlines():
            yield {field: line if isinstance(line, str) else decoding.text(line)}
    else:
        yield {field: decoding.text(data), "source": path.rsplit("/", 1)[-1]}


def _kind_of(path: str) -> str:
    if path.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return "parquet" if path.endswith(".parquet") else "files"


def _jsonl(path: str, data: bytes, field: str, decoding: Decoding) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = {field: decoding.text(line), "_error": f"line {number} of {path} is not JSON"}
        yield row if isinstance(row, dict) else {field: row}
