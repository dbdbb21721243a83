"""xirang's training data path against MosaicML Streaming, LitData and a memory-mapped bound.

Every side yields the same batches from the same tokens: one generated token stream (documents
of log-normal length, Zipf-distributed ids as in real text, an end-of-document id after each;
a whole number of batches of rows) read as shuffled int64 ``[8, 2049]`` tensors through a torch
DataLoader with the same number of workers.

- **xirang**: the stream as a token snapshot (shards of documents, zstd where it pays), read by
  ``TokenSource`` and ``TokenBatches`` through ``step_loader.loop_batches`` with
  ``data.num_workers`` workers and its ``get(step)``: the very call, reader, packing and tiers
  that feed the training loop.
- **streaming**: MosaicML Streaming MDS shards of packed rows with one token column (zstd), as
  its LLM examples write them, read by ``StreamingDataset`` + ``StreamingDataLoader``.
- **litdata**: LitData ``optimize`` with a ``TokensLoader``, read by ``StreamingDataset`` +
  ``StreamingDataLoader``, as its LLM examples do.
- **mmap**: the flat token file as a ``np.memmap``, whole shuffled batches per read: the bound.

Each side runs in a fresh process per pass; its timer covers constructing the dataset and
loader through the last batch, for all sides. Warm reads local files (in the page cache); cold
reads from a local S3 server (moto, started here) into an empty cache. Passes alternate sides
and the best of ``--runs`` counts. Also reported: time to first batch, bytes on disk and the
files each side cached from the origin. The resume phase (warm, local folders) restarts each
side mid-epoch from the state its own loader saved (``state_dict``; xirang's is the step): its
latency is a fresh loader's time to its first batch, and it is exact when its first ``--check``
batches are those the interrupted pass read next. ``--phases`` picks the phases run.

Streaming and LitData need torchvision and ``transformers<5``, which cannot share xirang's
environment: their side (benchmarks/data_loading_peers.py) runs in a venv this benchmark builds
once under ``XIRANG_HOME/bench-peers`` with pip (``--peers none`` measures xirang and mmap only;
``--peers PYTHON`` uses an interpreter that has them). A peer that cannot run is reported n/a.

Last line: ``warm_vs_streaming=<a> warm_vs_litdata=<b> cold_vs_streaming=<c> cold_vs_litdata=<d>
resume_speedup_vs_streaming=<e> resume_speedup_vs_litdata=<f> warm_vs_mmap=<g>`` (xirang over
the other side; n/a if absent), then ``resume_ms_<side>=<ms> resume_exact_<side>=yes|no`` for
xirang, streaming and litdata.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from benchmarks.data_loading_peers import SEED, digests, timed
from xirang_core.paths import xirang_home

PEERS = Path(__file__).with_name("data_loading_peers.py")
VOCAB, EOS = 50_257, 50_256
BUCKET = "xirang"
PEER_PACKAGES = ["mosaicml-streaming==0.13.0", "litdata==0.2.76", "boto3", "numpy<2.2"]
SIDES = ("xirang", "streaming", "litdata", "mmap")
RESUMED = ("xirang", "streaming", "litdata")  # the sides with a resume of their own
PHASES = ("warm", "cold", "resume")


# --- the corpus --------------------------------------------------------------------------------


def make_stream(tokens: int, span: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(token stream, document offsets): a whole number of ``[batch, span]`` batches."""
    rng = np.random.default_rng(SEED)
    total = max(1, tokens // (span * batch)) * span * batch
    lengths = np.clip(rng.lognormal(6.5, 1.0, total // 300 + 16), 16, 32_768).astype(np.int64)
    ends = np.cumsum(lengths)
    ends = np.append(ends[ends < total], total)
    stream = np.minimum(rng.zipf(1.2, size=total), EOS - 1).astype(np.uint16)
    stream[ends - 1] = EOS  # each document's last token marks its end, as the tokenizer's does
    return stream, np.concatenate([[0], ends])


def write_xirang(stream: np.ndarray, offsets: np.ndarray, root: Path, shard_tokens: int) -> str:
    """The stream's documents as a token snapshot under ``root/tokens``; returns its id."""
    import pyarrow as pa
    from xirang_data.snapshot import Snapshot, save
    from xirang_data.token_shards import COLUMN, KIND, tokens_tier, write_token_shard

    from xirang.storage.locate import tier_for

    dst = tokens_tier(tier_for(str(root)))
    cuts = offsets[np.searchsorted(offsets, np.arange(0, offsets[-1], shard_tokens))]
    cuts = np.unique(np.append(cuts, offsets[-1]))
    infos, counts = [], []
    for lo, hi in itertools.pairwise(cuts):
        docs = offsets[(offsets >= lo) & (offsets <= hi)] - lo
        column = pa.ListArray.from_arrays(pa.array(docs.astype(np.int32)), stream[lo:hi])
        infos.append(write_token_shard(dst, pa.table({COLUMN: column})))
        counts.append(int(hi - lo))
    lineage = {"kind": KIND, "source": "0" * 16, "tokenizer": "zipf", "fingerprint": "none"}
    lineage.update(
        vocab_size=VOCAB, dtype="uint16", shard_tokens=counts, text_bytes=2 * len(stream)
    )
    snap = Snapshot({COLUMN: "list<item: uint16>"}, tuple(infos), lineage=lineage)
    save(dst, snap)
    return snap.id


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- the xirang side (run in a fresh process, as every side) -----------------------------------


def xirang_loader(args: argparse.Namespace, start: int = 0):
    """The training path's batches from step ``start + 1``, read by DataLoader workers."""
    from xirang_data.fetch import TierSettings
    from xirang_data.snapshot import load
    from xirang_data.stream import SourceRead, TokenSource
    from xirang_data.token_shards import tokens_tier

    from xirang.storage.locate import tier_for
    from xirang_core.data.order import Partition
    from xirang_core.data.step_loader import loop_batches
    from xirang_core.data.tokens import NamedSource, TokenBatches

    origin = tokens_tier(tier_for(args.remote or args.dir))
    snap = load(origin, args.snapshot)
    tiers = TierSettings(cache_dir=args.cache if args.remote else "")
    read = SourceRead(args.span, seed=SEED, vocab_size=VOCAB)
    source = TokenSource(snap, origin, tiers, read)
    part = Partition(args.batch)
    batches = TokenBatches([NamedSource("corpus", source)], part, 1, SEED, "train", None)
    steps = source.rows_per_epoch // args.batch
    return loop_rows(loop_batches(batches, steps, args.workers), start + 1, steps)


def loop_rows(loop, first: int, last: int):
    """Steps ``first .. last`` read by the training loop's own call, ``get(step)``, as the
    [batch, seq + 1] row tensor its inputs and targets are views of, so every side counts the
    same tokens. The view is that tensor, not a copy: the loop never joins inputs and targets,
    and a peer's batch is its loader's tensor as is (a torch.cat here cost ~29 ms on its first
    call, inside a resume's timed span)."""
    import torch

    for step in range(first, last + 1):
        inputs, targets = loop.get(step)
        rows = torch.as_strided(inputs, (inputs.shape[0], inputs.shape[1] + 1), inputs.stride())
        shifted = targets.data_ptr() == inputs.data_ptr() + inputs.element_size()
        assert shifted and targets.stride() == inputs.stride(), "views of one row tensor"
        yield rows


def xirang_side(args: argparse.Namespace) -> dict:
    """A pass (or, with ``--stop``, its first batches; with ``--resume``, the first batch from
    step ``--stop``: xirang's state is the step, so resuming is a loader started there)."""
    import numpy.random  # noqa: F401 - imports are not timed, for any side (numpy's is lazy)

    # the reader's modules, a plugin since 5 December: imported inside the timed span until
    # this (pyarrow and zstd with them), they were most of a resume's first batch
    import xirang_data.fetch
    import xirang_data.stream
    import xirang_data.token_shards  # noqa: F401

    import xirang_core.data.step_loader  # noqa: F401
    from xirang.storage.locate import tier_for

    tier_for(args.remote or args.dir)  # plugins are imported once a process: not timed either

    if args.resume:
        figures, (_, read, last) = timed(lambda: xirang_loader(args, args.stop), 1)
        return {**figures, "next": digests([last], read, args.check)}
    figures, (_, read, _) = timed(lambda: xirang_loader(args), args.stop)
    if args.check:  # after the timer: the batches that follow the stop, as a resume's should
        figures["next"] = digests([], read, args.check)
    if args.remote:
        cached = Path(args.cache).rglob("*")
        figures["files"] = sum(1 for p in cached if p.is_file() and ".locks" not in p.parts)
    return figures


# --- running the sides -------------------------------------------------------------------------


def peer_python(choice: str) -> tuple[str | None, str]:
    """The interpreter with Streaming and LitData, built on first use; or None and why not."""
    if choice == "none":
        return None, "--peers none"
    if choice != "auto":
        return choice, ""
    venv = xirang_home() / "bench-peers"
    python, built = venv / "bin" / "python", venv / "built"  # built: pip finished there
    if not built.exists():  # a build cut short (a timeout killed pip) is built again
        print(f"building the peers' venv in {venv} (once; pip)", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip = [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES]
            subprocess.run(pip, check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as err:
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"building its venv failed: {(err.stderr or '').strip()[-300:]}"
        built.touch()
    return str(python), ""


class Runner:
    """Runs one side in a fresh process and parses its JSON figures; a peer that fails is
    dropped with the reason, the other sides go on."""

    def __init__(self, args: argparse.Namespace, work: Path, peers: str | None) -> None:
        self.args, self.work, self.peers = args, work, peers
        self.why: dict[str, str] = {}
        self.snapshot = ""

    def live(self, side: str) -> bool:
        return side not in self.why and (side in ("xirang", "mmap") or self.peers is not None)

    def argv(self, side: str, source: str) -> list[str]:
        a = self.args
        shape = ["--span", str(a.span), "--batch", str(a.batch), "--workers", str(a.workers)]
        if side == "xirang":
            return [sys.executable, __file__, "--side", source, "--snapshot", self.snapshot, *shape]
        python = sys.executable if side == "mmap" else self.peers
        return [python, str(PEERS), "read", side, source, *shape]

    def run(self, side: str, source: str, *extra: str, env: dict | None = None) -> dict | None:
        if not self.live(side):
            return None
        done = subprocess.run(
            [*self.argv(side, source), *extra],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if done.returncode == 0 else _failed(done)
        except (ValueError, IndexError, RuntimeError) as err:
            self.why[side] = f"it failed ({err})"
            return None


def _failed(done: subprocess.CompletedProcess) -> dict:
    tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
    raise RuntimeError(f"exit {done.returncode}: {' | '.join(tail)}")


def best_of(runs: int, sides: list[str], measure: Callable[[str, int], dict | None]) -> dict:
    """Each side ``runs`` times, alternating (the order rotates every round); the fastest."""
    best: dict[str, dict] = {}
    for round_ in range(runs):
        for side in sides[round_ % len(sides) :] + sides[: round_ % len(sides)]:
            got = measure(side, round_)
            if got and (side not in best or got["seconds"] < best[side]["seconds"]):
                best[side] = got
    return best


def write_peers(runner: Runner, flat: Path) -> None:
    """Streaming's and LitData's own formats of the same stream, by their own writers."""
    for side in ("streaming", "litdata"):
        if not runner.live(side):
            continue
        argv = [runner.peers, str(PEERS), "write", side, str(flat), str(runner.work / side)]
        done = subprocess.run([*argv, "--span", str(runner.args.span)], capture_output=True)
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
            runner.why[side] = f"writing its format failed ({' | '.join(tail)})"


def origin_of(side: str) -> str:
    return {"xirang": "xirang", "mmap": "mmap/tokens.bin"}.get(side, side)


def warm(runner: Runner) -> dict:
    """Passes over local files: every side's files are read once first (the page cache)."""
    work = runner.work
    for path in work.rglob("*"):
        if path.is_file():
            path.read_bytes()

    def measure(side: str, _round: int) -> dict | None:
        return runner.run(side, str(work / origin_of(side)))

    return best_of(runner.args.runs, list(SIDES), measure)


def cold(runner: Runner) -> dict:
    """Passes from the local S3 server into an empty cache (a fresh one every pass)."""
    from xirang_data.sync import sync
    from xirang_data.token_shards import tokens_tier

    from xirang.storage.local_s3 import local_s3
    from xirang.storage.locate import tier_for

    work = runner.work
    with local_s3(BUCKET) as endpoint:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        to_s3 = tokens_tier(tier_for(f"s3://{BUCKET}/xirang"))
        sync(tokens_tier(tier_for(str(work / "xirang"))), to_s3, runner.snapshot)
        fs.put(str(work / "mmap" / "tokens.bin"), f"{BUCKET}/mmap/tokens.bin")
        for side in ("streaming", "litdata"):
            if runner.live(side):
                fs.put(f"{work / side}/", f"{BUCKET}/{side}/", recursive=True)
        env = {"S3_ENDPOINT_URL": endpoint}

        def measure(side: str, round_: int) -> dict | None:
            cache = work / "cold-cache" / f"{side}-{round_}"
            cache.mkdir(parents=True)
            remote = f"s3://{BUCKET}/{origin_of(side)}"
            args = ("--remote", remote, "--cache", str(cache))
            try:
                return runner.run(side, str(work / origin_of(side)), *args, env=env)
            finally:
                shutil.rmtree(cache, ignore_errors=True)

        return best_of(runner.args.runs, list(SIDES), measure)


def resume(runner: Runner, at: int) -> dict:
    """Mid-epoch resume, warm: a loader at batch ``at`` from its saved state, to its first
    batch. Streaming and LitData save their loader's state after ``at`` batches, with their
    loader's ``state_dict`` (xirang's state is the step), and that pass reads on: the resume is
    exact when its first ``--check`` batches are the ones that pass read next, in every round."""
    work, check = runner.work, ("--check", str(runner.args.check))
    exact: dict[str, bool] = {}

    def measure(side: str, round_: int) -> dict | None:
        source = str(work / origin_of(side))
        if side == "xirang":
            before = runner.run(side, source, "--stop", str(at), *check)
            after = runner.run(side, source, "--stop", str(at), "--resume", "step", *check)
        else:
            state = work / f"{side}-state-{round_}.json"
            before = runner.run(side, source, "--stop", str(at), "--state", str(state), *check)
            after = before and runner.run(side, source, "--resume", str(state), *check)
        if not before or not after:
            return None
        exact[side] = exact.get(side, True) and after["next"] == before["next"]
        return after

    best = best_of(runner.args.runs, list(RESUMED), measure)
    return {side: {**got, "exact": exact[side]} for side, got in best.items()}


# --- the report --------------------------------------------------------------------------------


def report(kind: str, results: dict, runner: Runner) -> None:
    for side in SIDES:
        r = results.get(side)
        if r is None:
            why = runner.why.get(side, "not measured")
            print(f"{kind:5s} {side:9s} n/a ({why})")
            continue
        extra = f", {r['files']} files cached from the origin" if "files" in r else ""
        print(
            f"{kind:5s} {side:9s} {r['batches'] / r['seconds']:8.1f} batches/s "
            f"({r['tokens'] / r['seconds'] / 1e6:6.1f} M tokens/s), first batch "
            f"{r['first_s'] * 1e3:7.0f} ms, {r['batches']} batches{extra}"
        )


def same_tokens(results: dict) -> str:
    """Whether every side's epoch read the same tokens (count and sum of the ids)."""
    seen = {side: (r["tokens"], r["sum"]) for side, r in results.items()}
    if len(set(seen.values())) == 1:
        return "every side read the same tokens (count and sum equal)"
    return "tokens read (count, sum): " + ", ".join(f"{s} {v}" for s, v in seen.items())


def ratio(x: dict | None, other: dict | None, key: str = "rate") -> str:
    if not x or not other:
        return "n/a"
    if key == "rate":
        return f"{(x['batches'] / x['seconds']) / (other['batches'] / other['seconds']):.2f}"
    return f"{other['seconds'] / x['seconds']:.2f}"


def last_line(w: dict, c: dict, r: dict) -> str:
    x = "xirang"
    line = (
        f"warm_vs_streaming={ratio(w.get(x), w.get('streaming'))} "
        f"warm_vs_litdata={ratio(w.get(x), w.get('litdata'))} "
        f"cold_vs_streaming={ratio(c.get(x), c.get('streaming'))} "
        f"cold_vs_litdata={ratio(c.get(x), c.get('litdata'))} "
        f"resume_speedup_vs_streaming={ratio(r.get(x), r.get('streaming'), 'time')} "
        f"resume_speedup_vs_litdata={ratio(r.get(x), r.get('litdata'), 'time')} "
        f"warm_vs_mmap={ratio(w.get(x), w.get('mmap'))}"
    )
    for side in RESUMED:
        got = r.get(side)
        line += f" resume_ms_{side}={got['seconds'] * 1e3:.0f}" if got else f" resume_ms_{side}=n/a"
        line += f" resume_exact_{side}={exact(got)}"
    return line


def exact(got: dict | None) -> str:
    """yes: every round's resumed batches were the uninterrupted pass's next ones."""
    return "n/a" if got is None else "yes" if got["exact"] else "no"


def report_resume(r: dict, runner: Runner, at: int) -> None:
    for side in RESUMED:
        got = r.get(side)
        if got is None:
            print(f"resume at batch {at}: {side} n/a ({runner.why.get(side, 'not measured')})")
            continue
        print(
            f"resume at batch {at}: {side} {got['seconds'] * 1e3:.0f} ms to its first batch; "
            f"its next {runner.args.check} batches {'are' if got['exact'] else 'are NOT'} "
            "the uninterrupted pass's"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=50_000_000, help="tokens in the corpus")
    parser.add_argument("--shard-mb", type=float, default=4.0, help="xirang token shard size")
    parser.add_argument("--runs", type=int, default=3, help="passes per side (best counts)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers, every side")
    parser.add_argument("--span", type=int, default=2049, help="tokens a row (seq_len + 1)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--peers", default="auto", help="auto | none | a python with the peers")
    parser.add_argument(
        "--phases", default=",".join(PHASES), help="which to run, of warm,cold,resume"
    )
    parser.add_argument("--check", type=int, default=4, help="batches a resume is checked on")
    parser.add_argument("--side", default="", help=argparse.SUPPRESS)  # a xirang pass: its dir
    parser.add_argument("--snapshot", default="", help=argparse.SUPPRESS)
    for flag in ("--remote", "--cache", "--resume"):
        parser.add_argument(flag, default="", help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        import torch

        torch.set_num_threads(1)
        args.dir = args.side
        print(json.dumps(xirang_side(args)))
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    phases = args.phases.split(",")
    if not phases or set(phases) - set(PHASES):
        sys.exit(f"xirang error: --phases {args.phases}: choose from {','.join(PHASES)}")
    peers, why = peer_python(args.peers)
    work = Path(tempfile.mkdtemp(prefix="xirang-loading-"))
    try:
        runner = Runner(args, work, peers)
        if peers is None:
            runner.why.update(streaming=why, litdata=why)
        stream, offsets = make_stream(args.tokens, args.span, args.batch)
        (work / "mmap").mkdir()
        stream.tofile(work / "mmap" / "tokens.bin")
        shard_tokens = int(args.shard_mb * 2**20) // 2
        runner.snapshot = write_xirang(stream, offsets, work / "xirang", shard_tokens)
        write_peers(runner, work / "mmap" / "tokens.bin")
        batches = len(stream) // (args.span * args.batch)
        print(
            f"{len(stream):,} tokens ({len(offsets) - 1:,} documents), {batches} batches of "
            f"[{args.batch}, {args.span}] int64, {args.workers} DataLoader workers, best of "
            f"{args.runs} alternating passes"
        )
        disk = {s: folder_bytes(work / s) for s in SIDES if (work / s).exists()}
        print("bytes on disk: " + ", ".join(f"{s} {b / 1e6:.1f} MB" for s, b in disk.items()))
        w, c, r = {}, {}, {}
        if "warm" in phases:
            w = warm(runner)
            report("warm", w, runner)
            print(same_tokens(w))
        if "cold" in phases:
            c = cold(runner)
            report("cold", c, runner)
        if "resume" in phases:
            r = resume(runner, batches // 2)
            report_resume(r, runner, batches // 2)
        print(last_line(w, c, r))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
