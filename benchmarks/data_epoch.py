"""One full epoch of training data through the path that feeds the loop, from a moto S3 origin.

The reader, packing and tiers are the very ones a training run uses (``TokenSource`` and
``TokenBatches`` over ``ShardFetcher``: memory, a local disk cache with a byte limit, the S3
origin), with the model step left out. The corpus is written as token shards of random ids
(uint16, so zstd does not pay and they are stored raw) whose total is a whole number of
batches of ``seq+1``-token rows, so "every token read once" is checked exactly: the count and
the sum of every token the epoch yields equal the corpus's. A second, 10x smaller corpus is
walked by a fresh process with the same settings, for the resident-memory comparison.

    python benchmarks/data_epoch.py                      # the issue's size: 1.5 GB, 300 MB cache
    python benchmarks/data_epoch.py --gb 0.3 --cache-mb 60 --shard-mb 2 --memory-mb 16
    python benchmarks/data_epoch.py --train              # a real training run on that corpus

``--train`` writes a corpus of the same size and layout (same seed and document lengths, token
ids below ``--vocab``), named as the token shards of a small text snapshot in a local word-level
tokenizer of those ids (``tokenizer=hf``), and runs ``python -m xirang`` on it for ``--steps``
steps (a one-layer GPT, ``storage=s3_cache``, the disk cache limited to ``--cache-mb``), sampling
the cache folder all along; then the same on the 10x smaller corpus, for the resident-memory
comparison (each run's peak RSS, launcher and worker, from ``wait4``). A few hundred CPU
steps read only a few MB of rows, so ``--train`` defaults to 512 KB shards and a 2 MB cache (the
run reads several times its cache limit and must evict as it goes) and to 512 ids (with 2,048 the
model's logits alone swung the peak RSS of one setting by 20% between runs; with 512, by 3%).
Its last line: ``train_steps=<n> cache_limit_mb=<l> peak_cache_mb=<p> shard_mb=<s>
within_limit_plus_shard=<bool> rows_mb=<r> shards_fetched=<k> shard_gets=<g> rss_mb=<a>
rss_small_mb=<b> rss_ratio=<a/b> tokens_per_s=<t>``, where ``rows_mb`` is what the run's rows
span, ``shards_fetched`` the distinct shards asked of S3 and ``shard_gets`` the GET requests for
them: the run's closing evaluation reads the first rows again (``data.val_fraction=0``: the
held-out rows are training rows), so the shards they lie in, evicted by then, are asked twice.

The decoded-shard budget (``--memory-mb``) should stay below the small corpus, or the small
corpus fits in memory whole and its resident memory is lower for that reason alone.

Last line: ``epoch_gb=<g> cache_limit_mb=<l> peak_cache_mb=<p> shard_mb=<s>
within_limit_plus_shard=<bool> every_token_once=<bool> rss_mb=<a> rss_small_mb=<b>
rss_ratio=<a/b> epoch_s=<t> tokens_per_s=<r>``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xirang_data.fetch import TierSettings
from xirang_data.snapshot import Snapshot, load, save
from xirang_data.stream import SourceRead, TokenSource
from xirang_data.token_shards import (
    COLUMN,
    KIND,
    token_table,
    tokens_tier,
    write_token_shard,
)

from xirang.storage.cache import DiskCache
from xirang.storage.locate import tier_for
from xirang_core.data.order import Partition
from xirang_core.data.tokens import NamedSource, TokenBatches

BUCKET = "xirang"
VOCAB = 50_257
#: settings by mode: the issue's epoch walk, and the training run (``--train``)
WALK_DEFAULTS = {
    "cache_mb": 300.0, "shard_mb": 4.0, "memory_mb": 32.0, "seq": 2048, "batch": 8, "block": 4,
    "prefetch": 4, "vocab": VOCAB,
}  # fmt: skip
# A few hundred CPU steps read a few MB of rows: small shards and a cache below what the run
# reads, so the run evicts and the bound means something; 512 ids, so the model's own memory
# (its logits) does not drown the data path's in the resident-memory comparison.
TRAIN_DEFAULTS = {
    "cache_mb": 2.0, "shard_mb": 0.5, "memory_mb": 1.0, "seq": 512, "batch": 16, "block": 2,
    "prefetch": 2, "vocab": 512,
}  # fmt: skip


class CachePeak:
    """The most bytes a cache folder held, sampled every 20 ms in a thread until :meth:`stop`
    (the folder is only looked at; it may not exist yet)."""

    def __init__(self, folder: str, limit: int) -> None:
        self.folder, self.cache, self.bytes = folder, DiskCache(folder, limit), 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            if os.path.isdir(self.folder):
                self.bytes = max(self.bytes, sum(self.cache.usage().values()))
            time.sleep(0.02)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def write_corpus(
    uri: str,
    tokens: int,
    shard_tokens: int,
    span: int,
    batch: int,
    named: dict | None = None,
    vocab: int = VOCAB,
) -> dict:
    """Random token documents (log-normal lengths, ids below ``vocab``) as a token snapshot;
    returns its id and the count and sum of its tokens (a whole number of batches of rows).
    ``named``: the lineage keys (source snapshot, tokenizer, fingerprint) that make it a run's
    token shards."""
    rng = np.random.default_rng(0)
    total = tokens // (span * batch) * span * batch
    dst = tokens_tier(tier_for(uri))
    infos, counts, value_sum, left = [], [], 0, total
    while left:
        size = min(shard_tokens, left)
        lengths = np.maximum(rng.lognormal(7.0, 1.0, size // 200 + 2).astype(np.int64), 1)
        lengths = lengths[np.cumsum(lengths) < size]
        lengths = np.append(lengths, size - lengths.sum())
        flat = rng.integers(0, vocab, size, dtype=np.uint16)
        value_sum += int(flat.sum(dtype=np.int64))
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        docs = [flat[offsets[i] : offsets[i + 1]] for i in range(len(lengths))]
        infos.append(write_token_shard(dst, token_table(docs, np.dtype(np.uint16))))
        counts.append(size)
        left -= size
    lineage = {"kind": KIND, "source": "0" * 16, "tokenizer": "random", "fingerprint": "none"}
    lineage.update(named or {})
    lineage.update(vocab_size=vocab, dtype="uint16", shard_tokens=counts, text_bytes=2 * total)
    snap = Snapshot({COLUMN: "list<item: uint16>"}, tuple(infos), lineage=lineage)
    save(dst, snap)
    return {"snapshot": snap.id, "tokens": total, "sum": value_sum, "shards": len(infos)}


def walk(args: argparse.Namespace) -> dict:
    """One epoch of batches as the loop reads them; peak cache bytes sampled all along."""
    origin = tokens_tier(tier_for(args.uri))
    snap = load(origin, args.snapshot)
    tiers = TierSettings(
        cache_dir=args.cache_dir,
        cache_limit_bytes=int(args.cache_mb * 2**20),
        memory_limit_bytes=int(args.memory_mb * 2**20),
        prefetch_shards=args.prefetch,
    )
    read = SourceRead(
        args.seq + 1, seed=1, shuffle=True, block_shards=args.block, vocab_size=args.vocab
    )
    source = TokenSource(snap, origin, tiers, read)
    batches = TokenBatches(
        [NamedSource("corpus", source)], Partition(args.batch), 1, 1, "train", None
    )
    peak = CachePeak(args.cache_dir, tiers.cache_limit_bytes)
    steps = source.rows_per_epoch // args.batch
    count, value_sum, started = 0, 0, time.perf_counter()
    for step in range(1, steps + 1):
        x, y = batches.get(step)
        count += x.numel() + y.shape[0]  # inputs plus each row's last target: the row's tokens
        value_sum += int(x.sum()) + int(y[:, -1].sum())
    seconds = time.perf_counter() - started
    peak.stop()
    return {
        "tokens": count,
        "sum": value_sum,
        "seconds": seconds,
        "peak_cache": peak.bytes,
        "origin_bytes": source.fetcher.origin_bytes,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "shard_bytes": max(i.bytes for i in snap.shards),
    }


def run_walk(args: argparse.Namespace, uri: str, snapshot: str, cache_dir: str) -> dict:
    """The walk in a fresh process, so its peak resident memory is its own."""
    argv = [sys.executable, __file__, "--walk", "--uri", uri, "--snapshot", snapshot]
    argv += ["--cache-dir", cache_dir]
    for key in WALK_DEFAULTS:  # every setting, as this process has it
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def word_tokenizer(folder: Path, vocab: int) -> tuple[Path, str]:
    """A local word-level tokenizer.json of ``vocab`` ids ("t0" ... ), ending documents with
    "t0"; returns its file and the fingerprint a run computes for it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from xirang_tokenizers.hf import HFTokenizer

    backend = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t1"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    file = folder / "tokenizer.json"
    backend.save(str(file))
    return file, HFTokenizer(backend, "t0", file).fingerprint


def train(args: argparse.Namespace, url: str, tmp: str, name: str, gb: float) -> dict:
    """A real training run over a ``gb`` corpus in S3, the cache folder sampled all along and
    the run's own peak resident memory (launcher and worker) taken from ``wait4``."""
    from xirang_data.prepare import PrepareSettings, prepare
    from xirang_data.quality import Rules

    uri, cache_dir = f"s3://{BUCKET}/{name}", os.path.join(tmp, f"cache-{name}")
    file, fingerprint = word_tokenizer(Path(tmp), args.vocab)
    samples = [{"text": f"t{i} t{i + 1}"} for i in range(2, 50)]
    text = prepare(samples, tier_for(uri), Rules(), PrepareSettings(progress=False), {})[0]
    named = {"source": text.id, "tokenizer": "hf", "fingerprint": fingerprint}
    span, shard_tokens = args.seq + 1, int(args.shard_mb * 2**20) // 2
    made = write_corpus(uri, int(gb * 1e9) // 2, shard_tokens, span, args.batch, named, args.vocab)
    print(f"{name}: {made['tokens']:,} tokens in {made['shards']} shards on S3", flush=True)
    overrides = [
        "model=gpt_tiny", "model.n_layer=1", "model.n_embd=32", "model.n_head=2",
        f"model.max_seq_len={args.seq}", "tokenizer=hf", f"tokenizer.path={file}",
        "tokenizer.eos_token=t0", "storage=s3_cache", f"storage.endpoint_url={url}",
        f"data.uri={uri}", f"data.seq_len={args.seq}", "data.val_fraction=0",
        f"data.cache_dir={cache_dir}", f"data.cache_limit_bytes={int(args.cache_mb * 2**20)}",
        f"data.memory_limit_bytes={int(args.memory_mb * 2**20)}",
        f"data.shuffle_block={args.block}", f"data.prefetch_shards={args.prefetch}",
        f"trainer.max_steps={args.steps}", f"trainer.global_batch={args.batch}",
        "trainer.log_every=50", "trainer.sample_tokens=0", "checkpoint=disabled",
        f"hydra.run.dir={os.path.join(tmp, name)}",
    ]  # fmt: skip
    peak = CachePeak(cache_dir, int(args.cache_mb * 2**20))
    run = subprocess.Popen([sys.executable, "-m", "xirang", *overrides], cwd=tmp)
    _, status, usage = os.wait4(run.pid, 0)
    peak.stop()
    if status:
        raise SystemExit(f"the training run failed (wait status {status})")
    summary = json.loads(Path(tmp, name, "summary.json").read_text())
    shard = max(i.bytes for i in load(tokens_tier(tier_for(uri)), made["snapshot"]).shards)
    return {
        "steps": summary["steps"],
        "tokens_per_s": summary["tokens_per_s"],
        "peak_cache": peak.bytes,
        "shard_bytes": shard,
        "rows_bytes": summary["steps"] * args.batch * span * 2,
        "rss": usage.ru_maxrss * 1024,
    }


def shard_gets(log: Path, name: str) -> tuple[int, int]:
    """GET requests for ``name``'s token shards in the moto request log, and distinct shards."""
    pattern = re.compile(rf"GET /{BUCKET}/{name}/tokens/shards/(\w+\.arrow)")
    found = [m.group(1) for m in map(pattern.search, log.read_text().splitlines()) if m]
    return len(found), len(set(found))


def report_train(args: argparse.Namespace, big: dict, small: dict) -> None:
    limit = args.cache_mb * 2**20
    print(
        f"train_steps={big['steps']} cache_limit_mb={args.cache_mb:g} "
        f"peak_cache_mb={big['peak_cache'] / 2**20:.2f} shard_mb={big['shard_bytes'] / 2**20:.3f} "
        f"within_limit_plus_shard={big['peak_cache'] <= limit + big['shard_bytes']} "
        f"rows_mb={big['rows_bytes'] / 2**20:.2f} shards_fetched={big['distinct']} "
        f"shard_gets={big['gets']} rss_mb={big['rss'] / 2**20:.0f} "
        f"rss_small_mb={small['rss'] / 2**20:.0f} rss_ratio={big['rss'] / small['rss']:.3f} "
        f"tokens_per_s={big['tokens_per_s']:.0f}"
    )


def run_train(args: argparse.Namespace) -> None:
    """The training run on the corpus and on one 10x smaller, over one local S3."""
    from xirang.storage.local_s3 import local_s3

    with tempfile.TemporaryDirectory(prefix="xirang-train-") as tmp:
        log = Path(tmp, "requests.log")
        ran = {}
        with local_s3(BUCKET, log=log) as url:
            for name, gb in (("train-big", args.gb), ("train-small", args.gb / 10)):
                ran[name] = train(args, url, tmp, name, gb)
                ran[name]["gets"], ran[name]["distinct"] = shard_gets(log, name)
                print(f"{name}: {json.dumps(ran[name])}", flush=True)
        report_train(args, ran["train-big"], ran["train-small"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.5, help="corpus size in GB of tokens")
    for key, kind, what in (
        ("cache_mb", float, "disk cache limit (MB)"),
        ("shard_mb", float, "token shard size (MB)"),
        ("memory_mb", float, "decoded shards in memory (MB)"),
        ("seq", int, "row length"),
        ("batch", int, "rows a step"),
        ("block", int, "data.shuffle_block"),
        ("prefetch", int, "data.prefetch_shards"),
        ("vocab", int, "token ids"),
    ):
        defaults = f"{WALK_DEFAULTS[key]:g} (--train: {TRAIN_DEFAULTS[key]:g})"
        parser.add_argument(f"--{key.replace('_', '-')}", type=kind, help=f"{what}; {defaults}")
    parser.add_argument("--train", action="store_true", help="a real training run instead")
    parser.add_argument("--steps", type=int, default=300, help="--train: training steps")
    parser.add_argument("--walk", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--uri", default="", help=argparse.SUPPRESS)
    parser.add_argument("--snapshot", default="", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for key, value in (TRAIN_DEFAULTS if args.train else WALK_DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.walk:
        print(json.dumps(walk(args)))
        return
    if args.train:
        run_train(args)
        return
    from xirang.storage.local_s3 import local_s3

    span, shard_tokens = args.seq + 1, int(args.shard_mb * 2**20) // 2
    with local_s3(BUCKET), tempfile.TemporaryDirectory(prefix="xirang-epoch-") as tmp:
        results = {}
        for name, gb in (("big", args.gb), ("small", args.gb / 10)):
            uri = f"s3://{BUCKET}/{name}"
            made = write_corpus(
                uri, int(gb * 1e9) // 2, shard_tokens, span, args.batch, vocab=args.vocab
            )
            print(f"{name}: {made['tokens']:,} tokens in {made['shards']} shards on S3", flush=True)
            walked = run_walk(args, uri, made["snapshot"], os.path.join(tmp, f"cache-{name}"))
            walked["once"] = (walked["tokens"], walked["sum"]) == (made["tokens"], made["sum"])
            results[name] = walked
            print(f"{name}: {json.dumps(walked)}", flush=True)
    big, small = results["big"], results["small"]
    limit = args.cache_mb * 2**20
    print(
        f"epoch_gb={big['tokens'] * 2 / 1e9:.3f} cache_limit_mb={args.cache_mb:.0f} "
        f"peak_cache_mb={big['peak_cache'] / 2**20:.1f} "
        f"shard_mb={big['shard_bytes'] / 2**20:.1f} "
        f"within_limit_plus_shard={big['peak_cache'] <= limit + big['shard_bytes']} "
        f"every_token_once={big['once'] and small['once']} "
        f"rss_mb={big['rss'] / 2**20:.0f} rss_small_mb={small['rss'] / 2**20:.0f} "
        f"rss_ratio={big['rss'] / small['rss']:.3f} epoch_s={big['seconds']:.1f} "
        f"tokens_per_s={big['tokens'] / big['seconds']:.0f}"
    )


if __name__ == "__main__":
    main()
