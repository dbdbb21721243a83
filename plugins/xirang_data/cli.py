"""``xirang data``: prepare, list, sync and verify dataset snapshots.

    xirang data prepare SRC DST [--format auto|files|lines|jsonl|parquet|hf]
                        [--min-chars N] ...
    xirang data snapshots DST
    xirang data tokenize DST --tokenizer NAME [--snapshot ID] [--workers N]
                         [--set tokenizer.KEY=V]
    xirang data sync SRC DST [--snapshot ID]
    xirang data verify DST [--snapshot ID]

SRC and DST are folders or fsspec URLs (``s3://bucket/prefix``); S3 endpoint and credentials come
from the standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone

from rich.console import Console
from rich.table import Table

from xirang.data import help_text, origin_errors, tier_for
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Report, Rules
from xirang_data.snapshot import list_ids, load
from xirang_data.sources import ERRORS, FORMATS, Decoding, iter_samples
from xirang_data.sync import sync, verify

console = Console(highlight=False)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    with origin_errors(" or ".join(v for k, v in vars(args).items() if k in ("src", "dst"))):
        return int(args.run(args) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xirang data",
        description="Prepare, list, sync and verify dataset snapshots.",
        epilog=help_text(__doc__.split("\n\n", 1)[1]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    p = sub.add_parser("prepare", help="pack a source into shards and a snapshot")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--field", default="text", help="the text field samples are checked on")
    p.add_argument("--encoding", default="utf-8", help="of text files (utf-16, latin-1, ...)")
    p.add_argument(
        "--errors",
        default="strict",
        choices=ERRORS,
        help="a byte that does not decode: strict quarantines its sample, replace makes it "
        "U+FFFD, ignore drops it",
    )
    p.add_argument("--min-chars", type=int, default=1)
    p.add_argument("--max-chars", type=int, default=0, help="0 = no limit")
    p.add_argument("--no-dedup", action="store_true", help="keep duplicate samples")
    p.add_argument("--rule", default="", help="module:function(sample) -> reason or None")
    p.add_argument("--shard-mb", type=float, default=32.0, help="uncompressed MiB per shard")
    p.add_argument("--workers", type=int, default=2, help="threads compressing shards")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=_prepare)
    t = sub.add_parser("tokenize", help="write a snapshot's token shards for a tokenizer")
    t.add_argument("dst", help="the dataset root holding the snapshot")
    t.add_argument("--tokenizer", required=True, help="a tokenizer option: bytes, bpe, hf ...")
    t.add_argument("--snapshot", default="", help="the snapshot id; the latest when empty")
    t.add_argument("--workers", type=int, default=2, help="tokenising processes (0: this one)")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tokenizer setting, e.g. --set tokenizer.vocab_size=4096 (repeatable)",
    )
    t.set_defaults(run=_tokenize)
    s = sub.add_parser("snapshots", help="list the snapshots of a dataset")
    s.add_argument("dst")
    s.set_defaults(run=_snapshots)
    y = sub.add_parser("sync", help="copy a snapshot, moving only shards DST lacks")
    y.add_argument("src")
    y.add_argument("dst")
    y.add_argument("--snapshot", default="")
    y.set_defaults(run=_sync)
    v = sub.add_parser("verify", help="check every shard of a snapshot against its checksum")
    v.add_argument("dst")
    v.add_argument("--snapshot", default="")
    v.set_defaults(run=_verify)
    return parser


def _prepare(args: argparse.Namespace) -> int:
    rules = Rules(args.field, args.min_chars, args.max_chars, not args.no_dedup, args.rule)
    settings = PrepareSettings(
        shard_bytes=int(args.shard_mb * 2**20), workers=args.workers, progress=not args.json
    )
    started = time.perf_counter()
    decoding = Decoding(args.encoding, args.errors)
    samples = iter_samples(args.src, args.format, args.field, decoding=decoding)
    meta = {"source": _public(args.src), "format": args.format}
    if decoding != Decoding():
        meta |= {"encoding": decoding.encoding, "errors": decoding.errors}
    snap, report = prepare(samples, tier_for(args.dst), rules, settings, meta)
    if args.json:
        print(json.dumps({"snapshot": snap.id, "shards": len(snap.shards), **report.as_dict()}))
        return 0
    console.print(
        f"snapshot [bold]{snap.id}[/]: {report.accepted:,} samples in {len(snap.shards)} shards "
        f"({snap.bytes / 2**20:.1f} MiB) in {time.perf_counter() - started:.1f} s"
    )
    _print_report(report)
    return 0


def _tokenize(args: argparse.Namespace) -> int:
    """The token snapshot of DST's snapshot in the run config's tokenizer (trained first when it
    learns from the corpus), written by worker processes with a progress bar."""
    from xirang import get_registry
    from xirang.data import compose, prepare_tokenizer, tokenizer_runtime
    from xirang_data.token_shards import tokenize_snapshot
    from xirang_data.training import SnapshotDataset

    registry = get_registry()
    pin = [f"data.snapshot={args.snapshot}"] if args.snapshot else []
    overrides = [f"tokenizer={args.tokenizer}", "data=snapshot", f"data.uri={args.dst}", *pin]
    config = compose([*overrides, *args.set], registry)
    dataset = SnapshotDataset()
    config = config.replace(data=dataset.prepare(config).data)
    started = time.perf_counter()
    tokenizer = prepare_tokenizer(config, registry, dataset)
    tier = tier_for(args.dst, config["storage"])
    snap = load(tier, config["data"]["snapshot"])
    runtime = {"tokenizer": tokenizer_runtime(tokenizer)}  # as the run's recipe names it
    recipe = {"tokenizer": config["tokenizer"], "runtime": runtime}
    tokens = tokenize_snapshot(tier, snap, tokenizer, recipe, args.workers, not args.json)
    total = sum(tokens.lineage["shard_tokens"])
    if args.json:
        print(json.dumps({"snapshot": tokens.id, "source": snap.id, "tokens": total}))
        return 0
    console.print(
        f"token snapshot [bold]{tokens.id}[/] of {snap.id}: {total:,} tokens "
        f"({tokens.lineage['dtype']}) in {len(tokens.shards)} shards "
        f"({tokens.bytes / 2**20:.1f} MiB) in {time.perf_counter() - started:.1f} s"
    )
    return 0


def _print_report(report: Report) -> None:
    if not report.quarantined:
        console.print("quality gate: every sample passed")
        return
    table = Table(title=f"quarantined {report.quarantined:,} samples")
    for column in ("reason", "count", "files", "examples"):
        table.add_column(column, overflow="fold")
    for reason, count in sorted(report.reasons.items()):
        files = report.files.get(reason, [])
        more = count - len(files) if files else 0
        named = ", ".join(files) + (f" (+{more} more)" if more else "")
        table.add_row(reason, f"{count:,}", named, " | ".join(map(repr, report.examples[reason])))
    console.print(table)


def _snapshots(args: argparse.Namespace) -> int:
    """The snapshots as a table; under 100 columns each source goes on a line below it, so
    every figure stays whole at 80."""
    tier = tier_for(args.dst)
    wide = console.width >= 100
    table = Table(title=f"snapshots in {_public(args.dst)}")
    columns = ("id", "created UTC", "samples", "shards", "MiB", "quarantined")
    for column in (*columns, "source") if wide else columns:
        table.add_column(column, no_wrap=column != "source", overflow="fold")
    sources = []
    for snap_id in list_ids(tier):
        snap = load(tier, snap_id)
        created = datetime.fromtimestamp(snap.meta.get("created", 0), timezone.utc)
        source = str(snap.meta.get("source", ""))
        row = [
            snap.id,
            created.strftime("%Y-%m-%d %H:%M"),
            f"{snap.samples:,}",
            str(len(snap.shards)),
            f"{snap.bytes / 2**20:.1f}",
            str(sum(q.samples for q in snap.quarantine)),
        ]
        table.add_row(*row, *([source] if wide else []))
        sources.append(f"{snap.id} source: {source}")
    console.print(table)
    if not wide:
        for line in sources:
            console.print(line, overflow="fold")
    return 0


def _sync(args: argparse.Namespace) -> int:
    report = sync(tier_for(args.src), tier_for(args.dst), args.snapshot)
    console.print(
        f"snapshot {report.snapshot}: moved {report.moved} shards ({report.moved_bytes:,} bytes), "
        f"skipped {report.skipped} already there ({report.skipped_bytes:,} bytes)"
        + (f", replaced {report.replaced} corrupt there" if report.replaced else "")
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    snap_id, bad = verify(tier_for(args.dst), args.snapshot)
    if bad:
        console.print(f"snapshot {snap_id}: {len(bad)} bad shard(s): " + ", ".join(bad))
        return 1
    console.print(f"snapshot {snap_id}: every shard matches its checksum")
    return 0


def _public(url: str) -> str:
    """``url`` without any user:password part, so no secret reaches a manifest or a log."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.rsplit('@', 1)[-1]}" if sep else url
