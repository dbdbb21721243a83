"""The sides of benchmarks/data_loading.py that do not need xirang: MosaicML Streaming, LitData
and the plain memory-mapped NumPy bound, each in the interpreter data_loading.py gives it.

Streaming and LitData pull torchvision (and Streaming ``transformers<5``), which cannot share
xirang's environment, so data_loading.py runs this file in a venv it builds for them; the mmap
side runs in xirang's own interpreter. It imports only numpy, torch, boto3 and the peer.

    python data_loading_peers.py write KIND FLAT OUT        # KIND: streaming | litdata
    python data_loading_peers.py read KIND DIR [--remote s3://...] [--stop K] [--state F]
    python data_loading_peers.py read KIND DIR --resume F   # time to the first batch after F
    ... [--check N]   # with --state or --resume: hashes of the next N batches (exactness)

``FLAT`` is the packed token stream (uint16, a whole number of ``[batch, span]`` batches) that
data_loading.py writes; every side reads its rows shuffled as int64 ``[batch, span]`` tensors
through a torch DataLoader with ``--workers`` workers. ``read`` prints one JSON object: the timed
span runs from constructing the dataset to the last batch (or the first, with ``--resume``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import itertools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import torch

SEED = 0
#: rows per MDS shard / LitData chunk: 64 rows of 2049 uint16 tokens, about 256 KiB ... 8 MiB
ROWS_PER_FILE = 1024


def stacked(rows: list) -> torch.Tensor:
    """A list of token rows as the int64 [batch, span] tensor every side yields."""
    return torch.from_numpy(np.stack([np.asarray(r) for r in rows]).astype(np.int64))


def timed(make: Callable[[], Iterable], stop: int = 0) -> tuple[dict, list]:
    """Construct (timed) and read batches: seconds, first-batch seconds, tokens and their sum.
    With ``stop`` the read ends after that many batches; the loader is returned with them, and
    the iterator that read them (the next batches of the same pass, for :func:`digests`) and
    the last batch read."""
    started = time.perf_counter()
    loader = make()
    first, batches, tokens, total, batch = None, 0, 0, 0, None
    read = iter(loader)
    for batch in read:
        if first is None:
            first = time.perf_counter() - started
        batches, tokens, total = batches + 1, tokens + batch.numel(), total + int(batch.sum())
        if stop and batches == stop:
            break
    seconds = time.perf_counter() - started
    figures = {"seconds": seconds, "first_s": first or seconds, "batches": batches}
    return {**figures, "tokens": tokens, "sum": total}, [loader, read, batch]


def digests(first: list, read: Iterator, count: int) -> list[str]:
    """A short hash of each of ``count`` batches: those in ``first``, then the next ones of
    ``read``. A resume is exact when its batches hash as the uninterrupted pass's next ones
    (the pass that saved its state, read on)."""
    rows = [*first, *itertools.islice(read, count - len(first))]
    return [hashlib.sha1(r.numpy().tobytes()).hexdigest()[:12] for r in rows]


# --- the memory-mapped bound ------------------------------------------------------------------


class MappedRows(torch.utils.data.Dataset):
    """Rows of the flat token file by index, a whole batch per call (no per-sample collate)."""

    def __init__(self, path: str, span: int) -> None:
        self.path, self.span = path, span
        self.rows = os.path.getsize(path) // 2 // span
        self.tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, rows: list[int]) -> torch.Tensor:
        if self.tokens is None:  # opened in the worker process
            self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r").reshape(-1, self.span)
        return torch.from_numpy(self.tokens[rows].astype(np.int64))


def mmap_loader(args: argparse.Namespace, path: str, start: int = 0):
    """Shuffled batches of the flat file; ``start`` skips that many batches (a resume)."""
    data = MappedRows(path, args.span)
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(SEED)).tolist()
    batches = [order[i : i + args.batch] for i in range(0, len(data) - args.batch + 1, args.batch)]
    return torch.utils.data.DataLoader(
        data, sampler=batches[start:], batch_size=None, num_workers=args.workers
    )


def mmap_read(args: argparse.Namespace) -> dict:
    """Warm: the local file. Cold: download it from S3 first, inside the timed span."""
    if not args.remote:
        return timed(lambda: mmap_loader(args, args.dir), args.stop)[0]
    local = os.path.join(args.cache, "tokens.bin")

    def make():
        bucket, key = args.remote.removeprefix("s3://").split("/", 1)
        s3().download_file(bucket, key, local)
        return mmap_loader(args, local)

    return {**timed(make, args.stop)[0], "files": 1}


def s3():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT_URL"])


# --- MosaicML Streaming ---------------------------------------------------------------------


def streaming_write(flat: np.ndarray, out: str, span: int) -> None:
    """Rows as MDS samples with one token column (zstd), as Streaming's LLM examples write."""
    from streaming import MDSWriter

    rows = flat.reshape(-1, span)
    limit = ROWS_PER_FILE * span * 2
    columns = {"tokens": "ndarray:uint16"}
    with MDSWriter(out=out, columns=columns, compression="zstd", size_limit=limit) as writer:
        for row in rows:
            writer.write({"tokens": row})


def streaming_loader(args: argparse.Namespace, local: str, remote: str | None = None):
    from streaming import StreamingDataLoader, StreamingDataset

    data = StreamingDataset(
        local=local, remote=remote, shuffle=True, shuffle_seed=SEED, batch_size=args.batch
    )
    return StreamingDataLoader(
        data,
        batch_size=args.batch,
        num_workers=args.workers,
        drop_last=True,
        collate_fn=lambda samples: stacked([s["tokens"] for s in samples]),
    )


# --- LitData -----------------------------------------------------------------------------------


def _lit_rows(piece: tuple[str, int, int]):
    """One input of ``optimize``: a run of the token stream, yielded as one token array."""
    path, lo, hi = piece
    yield torch.from_numpy(np.fromfile(path, np.uint16, hi - lo, offset=2 * lo).astype(np.int16))


def litdata_write(flat_path: str, out: str, span: int) -> None:
    """The stream through ``optimize`` with a TokensLoader, as LitData's LLM examples do."""
    from litdata import TokensLoader, optimize

    total = os.path.getsize(flat_path) // 2
    step = ROWS_PER_FILE * span
    pieces = [(flat_path, lo, min(lo + step, total)) for lo in range(0, total, step)]
    optimize(
        fn=_lit_rows,
        inputs=pieces,
        output_dir=out,
        chunk_size=step,
        item_loader=TokensLoader(),
        num_workers=1,
    )


def litdata_loader(args: argparse.Namespace, local: str, remote: str | None = None):
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    options = {"endpoint_url": os.environ["S3_ENDPOINT_URL"]} if remote else {}
    if remote and options["endpoint_url"].startswith("http://"):
        from litdata.streaming import downloader  # its obstore client refuses plain http

        downloader._OBSTORE_CLIENT_OPTIONS = {
            **downloader._OBSTORE_CLIENT_OPTIONS,
            "allow_http": "true",
        }
    data = StreamingDataset(
        input_dir=remote or local,
        cache_dir=local if remote else None,
        item_loader=TokensLoader(block_size=args.span),
        shuffle=True,
        seed=SEED,
        storage_options=options,
    )
    return StreamingDataLoader(
        data,
        batch_size=args.batch,
        num_workers=args.workers,
        drop_last=True,
        collate_fn=lambda rows: stacked([r.numpy().view(np.uint16) for r in rows]),
    )


LOADERS = {"streaming": streaming_loader, "litdata": litdata_loader}


def peer_read(args: argparse.Namespace) -> dict:
    """A pass of Streaming or LitData; with ``--state`` the loader's state after ``--stop``
    batches is saved, and with ``--resume`` it is loaded and only the first batch is timed."""
    make = LOADERS[args.kind]
    local = args.cache if args.remote else args.dir

    def build():
        loader = make(args, local, args.remote)
        if args.resume:
            loader.load_state_dict(json.loads(Path(args.resume).read_text()))
        return loader

    figures, (loader, read, last) = timed(build, 1 if args.resume else args.stop)
    if args.state:
        Path(args.state).write_text(json.dumps(loader.state_dict()))
    if args.check:  # after the timer and the state: the batches that follow, or the resume's
        figures["next"] = digests([last] if args.resume else [], read, args.check)
    if args.remote:
        figures["files"] = sum(1 for p in Path(local).rglob("*") if p.is_file())
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["write", "read"])
    parser.add_argument("kind", choices=["streaming", "litdata", "mmap"])
    parser.add_argument("dir", help="write: the flat token file; read: the dataset folder")
    parser.add_argument("out", nargs="?", default="", help="write: the output folder")
    parser.add_argument("--span", type=int, default=2049)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--remote", default=None, help="read from this S3 prefix (cold)")
    parser.add_argument("--cache", default="", help="local cache folder of a cold read")
    parser.add_argument("--stop", type=int, default=0, help="stop after this many batches")
    parser.add_argument("--state", default="", help="save the loader's state here at the stop")
    parser.add_argument("--resume", default="", help="load this state, time the first batch")
    parser.add_argument("--check", type=int, default=0, help="hash this many next batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "write":
        if args.kind == "streaming":
            streaming_write(np.fromfile(args.dir, dtype=np.uint16), args.out, args.span)
        else:
            litdata_write(args.dir, args.out, args.span)
        return
    if args.kind != "mmap":
        importlib.import_module(args.kind)  # imports are not timed, for any side
    print(json.dumps(mmap_read(args) if args.kind == "mmap" else peer_read(args)))


if __name__ == "__main__":
    main()
