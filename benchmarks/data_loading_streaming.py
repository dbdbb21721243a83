"""The MosaicML Streaming side of benchmarks/data_loading.py, run in Streaming's own interpreter.

mosaicml-streaming pulls torchvision, whose wheels need torch 2.14 while xirang's environment has
torch 2.13, so data_loading.py starts this file as a subprocess with ``--streaming-python``. It
imports neither xirang nor pyarrow: only numpy, torch, boto3 and ``streaming``.

    python data_loading_streaming.py write FLAT MDS_DIR     # the same samples as MDS (zstd)
    python data_loading_streaming.py read MDS_DIR [--runs 2] # warm: shards already local
    python data_loading_streaming.py read CACHE_DIR --remote s3://bucket/mds  # cold

``FLAT`` is the flat token file with its ``.idx.npy`` offsets that data_loading.py writes, so the
MDS shards hold exactly the samples the other formats hold. ``read`` prints one JSON object (the
pass figures) as its last line; a remote read takes its endpoint from ``S3_ENDPOINT_URL``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

BATCH, WORKERS, SEED = 32, 2, 0
#: uncompressed bytes per MDS shard, as the WebDataset shards in data_loading.py
SHARD_BYTES = 16 * 2**20


def write_mds(flat: Path, out: Path) -> dict[str, float]:
    """Write every sample of ``flat`` as one MDS shard set with zstd compression."""
    from streaming import MDSWriter

    tokens = np.fromfile(flat, dtype=np.uint16)
    offsets = np.load(flat.with_suffix(".idx.npy"))
    columns = {"tokens": "ndarray:uint16"}
    with MDSWriter(out=str(out), columns=columns, compression="zstd", size_limit=SHARD_BYTES) as w:
        for start, end in itertools.pairwise(offsets):
            w.write({"tokens": tokens[start:end]})
    return {"samples": float(len(offsets) - 1)}


def loader(local: str, remote: str | None) -> torch.utils.data.DataLoader:
    """Streaming's documented set-up: a shuffled StreamingDataset in a plain DataLoader."""
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()  # an earlier pass in this process leaves its shared memory
    ds = StreamingDataset(
        local=local, remote=remote, shuffle=True, shuffle_seed=SEED, batch_size=BATCH
    )
    return torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=list)


def timed_pass(local: str, remote: str | None) -> dict[str, float]:
    """Samples/s and time to first batch, counted from building the dataset (it reads the index).

    A warm pass over compressed local shards decompresses each once next to it (Streaming's own
    cache), so the best of two warm passes is the one that reads decompressed shards.
    """
    started = time.perf_counter()
    first, seen = None, 0
    for batch in loader(local, remote):
        seen += len(batch)
        if first is None:
            first = time.perf_counter() - started
    wall = time.perf_counter() - started
    return {"samples_s": seen / wall, "first_batch_s": first or wall, "samples": float(seen)}


def origin_served(cache: Path) -> tuple[int, int]:
    """(bytes, files) the origin served a cold pass: the index, then each shard's stored form.

    Streaming decompresses a downloaded shard and drops the zstd file, so the cache's size is not
    what crossed the wire; the index says each shard's compressed size.
    """
    index = cache / "index.json"
    served, files = index.stat().st_size, 1
    for shard in json.loads(index.read_text())["shards"]:
        if (cache / shard["raw_data"]["basename"]).exists():
            served += (shard.get("zip_data") or shard["raw_data"])["bytes"]
            files += 1
    return served, files


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    write = actions.add_parser("write", help="write the flat token file as MDS shards")
    write.add_argument("flat", type=Path)
    write.add_argument("mds", type=Path)
    read = actions.add_parser("read", help="one shuffled pass (best of --runs)")
    read.add_argument("local", type=Path, help="MDS folder, or the cache of a --remote read")
    read.add_argument("--remote", default=None, help="s3:// URL of the shards (cold read)")
    read.add_argument("--runs", type=int, default=1)
    return parser.parse_args()


def main() -> None:
    args = parse()
    torch.set_num_threads(1)
    if args.action == "write":
        result = write_mds(args.flat, args.mds)
    else:
        runs = [timed_pass(str(args.local), args.remote) for _ in range(args.runs)]
        result = max(runs, key=lambda r: r["samples_s"])
        if args.remote:
            result["origin_bytes"], result["origin_files"] = origin_served(args.local)
    print(json.dumps(result))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
