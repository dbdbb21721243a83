"""xirang's reader side by side with MosaicML Streaming, WebDataset and plain PyTorch, in one run.

One dataset (tokenised text, log-normal lengths, the same bytes for every format) is written as
xirang shards, as Streaming MDS shards (zstd), as WebDataset tar shards and as one flat token file
with an offset index (a plain map-style PyTorch loader). Each is read with shuffling, batch size 32
and two loader workers. Reported: warm samples/s, cold samples/s from a local S3 server (moto),
time to first batch, bytes and requests from the origin, bytes on disk, xirang's mid-epoch resume,
and the ceilings (sequential read of the bytes, a bare Python loop over the samples).

mosaicml-streaming pulls torchvision, whose wheels need torch 2.14, so it cannot live in xirang's
torch 2.13 environment; its side (benchmarks/data_loading_streaming.py) runs in a separate one:

    python3 -m venv /tmp/streaming-env
    /tmp/streaming-env/bin/pip install torch==2.14.1 torchvision==0.29.1 mosaicml-streaming
    python benchmarks/data_loading.py --streaming-python /tmp/streaming-env/bin/python

Without ``--streaming-python`` the current interpreter is used if it can import ``streaming``;
otherwise the run says why Streaming was not measured and compares with the plain loader.

Last line: ``warm_vs_streaming=<x> warm_vs_webdataset=<y> cold_vs_streaming=<z>`` (without
Streaming: ``warm_vs_plain=<x> warm_vs_webdataset=<y> cold_vs_plain=<z>``).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from xirang_core.data.fetch import TierSettings
from xirang_core.data.prepare import PrepareSettings, prepare
from xirang_core.data.quality import Rules
from xirang_core.data.reader import ReadSettings, ShardReader, StatefulLoader
from xirang_core.data.sync import sync
from xirang_core.errors import ConfigError, XirangError
from xirang_core.storage.local_s3 import local_s3
from xirang_core.storage.locate import tier_for

BATCH, WORKERS, SEED = 32, 2, 0


def make_samples(n: int) -> list[np.ndarray]:
    """Token sequences with a realistic spread of lengths (median ~180, long tail to 4k)."""
    rng = np.random.default_rng(SEED)
    lengths = np.clip(rng.lognormal(5.2, 0.8, n), 8, 4096).astype(int)
    vocab = 50257  # token ids follow a Zipf law, as in real text, so compression is honest
    return [np.minimum(rng.zipf(1.3, size=k), vocab - 1).astype(np.uint16) for k in lengths]


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed_pass(batches: Iterable, count: Callable[[object], int]) -> dict[str, float]:
    """Samples/s over one pass, and the time to the first batch."""
    started = time.perf_counter()
    first, seen = None, 0
    for batch in batches:
        seen += count(batch)
        if first is None:
            first = time.perf_counter() - started
    wall = time.perf_counter() - started
    return {"samples_s": seen / wall, "first_batch_s": first or wall, "samples": seen}


# --- xirang ----------------------------------------------------------------------------------


def xirang_write(samples: list[np.ndarray], root: Path):
    rows = ({"tokens": s} for s in samples)
    settings = PrepareSettings(shard_bytes=8 * 2**20, progress=False)
    snap, _ = prepare(rows, tier_for(str(root)), Rules(field="tokens", dedup=False), settings, {})
    return snap


def xirang_count(batch) -> int:
    col = batch.column("tokens").combine_chunks()
    col.offsets.to_numpy()  # the batch as (values, offsets): what a collate would hand on
    return len(col)


def xirang_reader(snap, origin: str, cache: str = "") -> ShardReader:
    read = ReadSettings(batch_size=BATCH, seed=SEED, block_shards=2)
    return ShardReader(snap, tier_for(origin), read, TierSettings(cache_dir=cache))


def xirang_resume(snap, root: Path) -> dict[str, float]:
    """Stop halfway, resume from the state; the rest equals the uninterrupted order."""

    def ids(batches) -> list[bytes]:
        return [
            b.column("tokens").combine_chunks().values.to_numpy()[:4].tobytes() for b in batches
        ]

    full = ids(xirang_reader(snap, str(root)))
    reader = xirang_reader(snap, str(root))
    it = iter(reader)
    head = [next(it) for _ in range(len(full) // 2)]
    state = reader.state_dict()
    started = time.perf_counter()
    resumed = xirang_reader(snap, str(root))
    resumed.load_state_dict(state)
    rest_it = iter(resumed)
    first = next(rest_it)
    latency = time.perf_counter() - started
    same = ids(head) + ids([first, *rest_it]) == full
    return {"resume_s": latency, "resume_exact": float(same)}


# --- WebDataset ------------------------------------------------------------------------------


def wds_write(samples: list[np.ndarray], root: Path) -> list[str]:
    import webdataset as wds

    root.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(root / "shard-%05d.tar"), maxsize=16 * 2**20, verbose=0) as sink:
        for i, s in enumerate(samples):
            sink.write({"__key__": f"{i:08d}", "tok": s.tobytes()})
    return sorted(str(p) for p in root.glob("*.tar"))


def wds_loader(urls: list[str]):
    import webdataset as wds

    ds = (
        wds.WebDataset(urls, shardshuffle=len(urls), seed=SEED, empty_check=False)
        .shuffle(1000)
        .map(lambda s: np.frombuffer(s["tok"], dtype=np.uint16))
        .batched(BATCH, collation_fn=list)
    )
    # collate_fn=list keeps the numpy batch as the other loaders do: the default would turn each
    # sample into a tensor, sent to the main process in a shared-memory segment of its own
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS, collate_fn=list)


# --- plain PyTorch map-style dataset over one flat token file --------------------------------


class FlatTokens(torch.utils.data.Dataset):
    """Per-sample reads by offset, as a plain PyTorch dataset (and Streaming's MDS) does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = np.load(path.with_suffix(".idx.npy"))
        self.tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        if self.tokens is None:
            self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r")
        return np.array(self.tokens[self.offsets[i] : self.offsets[i + 1]])


def plain_write(samples: list[np.ndarray], root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "tokens.bin"
    np.concatenate(samples).tofile(path)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in samples])])
    np.save(path.with_suffix(".idx.npy"), offsets)
    return path


def plain_loader(path: Path):
    gen = torch.Generator().manual_seed(SEED)
    return torch.utils.data.DataLoader(
        FlatTokens(path),
        batch_size=BATCH,
        shuffle=True,
        num_workers=WORKERS,
        collate_fn=list,
        generator=gen,
    )


def plain_cold(path: Path, remote: str, scratch: Path) -> dict[str, float]:
    """Download the file from S3, then read it: what a plain loader must do with an origin."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.put(str(path), f"{remote}/tokens.bin")
    fs.put(str(path.with_suffix(".idx.npy")), f"{remote}/tokens.idx.npy")
    started = time.perf_counter()
    local = scratch / "tokens.bin"
    fs.get(f"{remote}/tokens.bin", str(local))
    fs.get(f"{remote}/tokens.idx.npy", str(local.with_suffix(".idx.npy")))
    result = timed_pass(plain_loader(local), len)
    total = time.perf_counter() - started
    return {
        **result,
        "samples_s": result["samples"] / total,
        "first_batch_s": result["first_batch_s"] + total - result["samples"] / result["samples_s"],
    }


# --- MosaicML Streaming, in its own interpreter ------------------------------------------------

PEER = Path(__file__).with_name("data_loading_streaming.py")


def streaming_python(given: str | None) -> tuple[str | None, str]:
    """The interpreter that runs Streaming's side, or None and the reason it is not measured."""
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"--streaming-python {given!r} is not a file; give a python path")
        return given, ""
    if importlib.util.find_spec("streaming") is not None:
        return sys.executable, ""
    return None, (
        "mosaicml-streaming is not importable here (it needs torch 2.14 and torchvision); "
        "install it in its own venv and pass --streaming-python, see this file's docstring"
    )


def run_peer(python: str, *args: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run data_loading_streaming.py and return the JSON figures of its last line."""
    done = subprocess.run(
        [python, str(PEER), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"exit {done.returncode}: {' | '.join(tail)}")
    return json.loads(lines[-1])


@dataclass
class StreamingSide:
    """Streaming's interpreter; after a failed step it is None and ``why`` says what failed."""

    python: str | None
    why: str

    def run(self, what: str, *args: str, env: dict[str, str] | None = None) -> dict | None:
        """One step of the peer script; a failure is reported, not fatal to the other figures."""
        if self.python is None:
            return None
        try:
            return run_peer(self.python, *args, env=env)
        except (RuntimeError, ValueError) as err:
            self.python, self.why = None, f"{what} failed ({err})"
            return None


def streaming_cold(peer: StreamingSide, mds: Path, endpoint: str, cache: Path) -> dict | None:
    """Upload the MDS shards to the local S3, then read them through Streaming's own download."""
    import s3fs

    remote = "s3://xirang/mds"
    s3fs.S3FileSystem(skip_instance_cache=True).put(f"{mds}/", f"{remote}/", recursive=True)
    env = {"S3_ENDPOINT_URL": endpoint}
    result = peer.run("cold read", "read", str(cache), "--remote", remote, env=env)
    if result:
        fetched = f"{result['origin_bytes'] / 1e6:.1f} MB in {int(result['origin_files'])} files"
        print(f"local S3 at {endpoint}: streaming fetched {fetched} from origin")
    return result


# --- the run -----------------------------------------------------------------------------------


def x_loader(snap, work: Path) -> StatefulLoader:
    return StatefulLoader(xirang_reader(snap, str(work / "xirang")), WORKERS)


def best_of(runs: int, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
    return max((measure() for _ in range(runs)), key=lambda r: r["samples_s"])


def warm_up_workers() -> None:
    """Start and stop a loader's worker processes once, so no contender pays that first cost."""
    list(torch.utils.data.DataLoader(range(4), batch_size=2, num_workers=WORKERS))


def limits(samples: list[np.ndarray], flat: Path) -> dict[str, float]:
    started = time.perf_counter()
    size = len(flat.read_bytes())
    read_gbs = size / (time.perf_counter() - started) / 1e9
    started = time.perf_counter()
    for _sample in samples:
        pass
    loop = len(samples) / (time.perf_counter() - started)
    return {"sequential_read_GBs": read_gbs, "bare_loop_samples_s": loop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument(
        "--streaming-python",
        default=None,
        help="python of an environment with mosaicml-streaming (default: this one, if it has it)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    peer = StreamingSide(*streaming_python(args.streaming_python))
    samples = make_samples(args.samples)
    work = Path(tempfile.mkdtemp(prefix="xirang-bench-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    snap = xirang_write(samples, work / "xirang")
    wds_why = webdataset_missing()
    urls = [] if wds_why else wds_write(samples, work / "wds")
    flat = plain_write(samples, work / "plain")
    formats = ["xirang", "plain"] if wds_why else ["xirang", "wds", "plain"]
    if peer.run("writing MDS", "write", str(flat), str(work / "mds")) is not None:
        formats.insert(1, "mds")
    disk = {k: folder_bytes(work / k) for k in formats}
    print(f"{args.samples:,} samples, {sum(len(s) for s in samples) * 2 / 1e6:.1f} MB of tokens")
    print("bytes on disk: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in disk.items()))

    warm_up_workers()
    for path in work.rglob("*"):  # warm: every format's bytes in the page cache
        if path.is_file():
            path.read_bytes()
    # best of two passes for the fast contenders: the machine may be shared; WebDataset once
    warm = {
        "xirang": best_of(2, lambda: timed_pass(x_loader(snap, work), xirang_count)),
        "streaming": peer.run("warm read", "read", str(work / "mds"), "--runs", "2"),
        "webdataset": None if wds_why else timed_pass(wds_loader(urls), len),
        "plain": best_of(2, lambda: timed_pass(plain_loader(flat), len)),
    }
    report("warm", warm)
    if "mds" in disk:
        after = folder_bytes(work / "mds") / 1e6  # Streaming keeps the shards it decompressed
        print(f"mds on disk after Streaming's warm reads: {after:.1f} MB")

    with local_s3() as endpoint:
        cold = {"xirang": xirang_cold(snap, work, endpoint)}
        if peer.python is not None:
            cold["streaming"] = streaming_cold(peer, work / "mds", endpoint, work / "mdscache")
        cold["plain"] = plain_cold(flat, "s3://xirang/plain", work / "plaincold")
    report("cold", cold)
    resume = xirang_resume(snap, work / "xirang")
    print(
        f"xirang resume mid-epoch: {resume['resume_s'] * 1e3:.0f} ms to the first batch, "
        f"order equals the uninterrupted one: {bool(resume['resume_exact'])}"
    )
    lim = limits(samples, flat)
    print(
        f"ceilings: sequential read {lim['sequential_read_GBs']:.1f} GB/s, bare loop "
        f"{lim['bare_loop_samples_s']:,.0f} samples/s"
    )
    if wds_why:
        print(f"WebDataset not measured: {wds_why}")
    print(last_line(warm, cold, peer))


def webdataset_missing() -> str:
    """Why WebDataset cannot be measured here ('' when it can): it is an optional extra."""
    if importlib.util.find_spec("webdataset") is not None:
        return ""
    return "webdataset is not installed (pip install 'xirang[bench]')"


def xirang_cold(snap, work: Path, endpoint: str) -> dict[str, float]:
    """Sync the shards to the local S3, read them cold, and count what the origin served."""
    remote = "s3://xirang/bench"
    sync(tier_for(str(work / "xirang")), tier_for(remote))
    reader = xirang_reader(snap, remote, str(work / "cache"))
    result = timed_pass(StatefulLoader(reader, WORKERS), xirang_count)
    fetch = xirang_reader(snap, remote, str(work / "cache2"))
    list(fetch)  # one process: count what the origin served
    fetched = fetch.fetcher
    origin = f"{fetched.origin_bytes / 1e6:.1f} MB in {fetched.throttle.requests} requests"
    print(f"local S3 at {endpoint}: xirang fetched {origin} from origin")
    return result


def last_line(warm: dict, cold: dict, peer: StreamingSide) -> str:
    """The issue's line against Streaming; against the plain loader, said so, without it.
    Without WebDataset installed its ratio is left out (the run said why)."""
    x_warm, x_cold = warm["xirang"]["samples_s"], cold["xirang"]["samples_s"]
    wds = warm.get("webdataset")
    vs_wds = [f"warm_vs_webdataset={x_warm / wds['samples_s']:.2f}"] if wds else []
    base = "streaming" if warm.get("streaming") and cold.get("streaming") else "plain"
    if base == "plain":
        print(f"Streaming not measured: {peer.why}; the baseline is the plain PyTorch loader")
    return " ".join(
        [
            f"warm_vs_{base}={x_warm / warm[base]['samples_s']:.2f}",
            *vs_wds,
            f"cold_vs_{base}={x_cold / cold[base]['samples_s']:.2f}",
        ]
    )


def report(kind: str, results: dict[str, dict[str, float]]) -> None:
    for name, r in results.items():
        if r is None:
            continue
        print(
            f"{kind:5s} {name:11s} {r['samples_s']:>10,.0f} samples/s, first batch "
            f"{r['first_batch_s'] * 1e3:,.0f} ms ({int(r['samples']):,} samples)"
        )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        main()
    except XirangError as err:  # bad input: one message, no traceback
        sys.exit(f"error: {err}")
