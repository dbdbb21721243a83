"""``xirang ckpt ls|verify|export|keep|import``: look after a run's checkpoints.

RUN is a run directory (its ``config.yaml`` says where the checkpoints are, ``s3://`` included)
or a checkpoint root path/URL. ``import FOLDER RUN`` brings a DCP checkpoint folder (torch's,
torchtitan's) in as a checkpoint of RUN; ``export --format dcp`` writes one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from xirang import ConfigError, get_registry, help_text
from xirang.checkpoint import (
    CheckpointConfig,
    CheckpointStore,
    CorruptCheckpoint,
    RefusedCheckpoint,
    check_loadable,
    checkpoint_uri,
    dcp_names,
    open_tier,
)
from xirang_ckpt.export import export_adapter, export_hf, export_safetensors, export_tokenizer
from xirang_ckpt.fit import TargetModel
from xirang_ckpt.interop import export_dcp, export_torchtitan, import_folder

CONFIG_FILE = "config.yaml"


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.action is cmd_import and "://" not in args.run:  # a new run's checkpoint root
        Path(args.run).mkdir(parents=True, exist_ok=True)
    store = open_store(args.run)
    return int(args.action(store, args) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xirang ckpt", description=help_text(__doc__))
    sub = parser.add_subparsers(required=True, metavar="{ls,verify,export,keep,import}")
    ls = sub.add_parser("ls", help="list checkpoints: step, size, new bytes, kept, state")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(action=cmd_ls)
    verify = sub.add_parser("verify", help="read every chunk and check it against the manifest")
    verify.add_argument("--step", type=int, help="only this step (default: all)")
    verify.set_defaults(action=cmd_verify)
    export = sub.add_parser(
        "export", help="write the model weights: safetensors, or a Hugging Face directory"
    )
    export.add_argument("--step", type=int, help="this step (default: newest valid)")
    export.add_argument(
        "--format",
        choices=("safetensors", "hf", "peft", "dcp", "torchtitan"),
        default="safetensors",
        help="safetensors: one file, xirang's names; hf: a directory transformers loads; "
        "peft: a LoRA run's adapters as a folder peft loads; "
        "dcp: a torch DCP folder with the optimizer state and step (torch); "
        "torchtitan: a step folder torchtitan's CheckpointManager loads (initial_load_path)",
    )
    export.add_argument(
        "-o", "--output", type=Path, help="file or folder (default: RUN/model-step<N>...)"
    )
    export.set_defaults(action=cmd_export)
    keep = sub.add_parser("keep", help="exempt a checkpoint from retention (--undo lifts it)")
    keep.add_argument("--undo", action="store_true")
    keep.set_defaults(action=cmd_keep)
    into = sub.add_parser(
        "import", help="bring a DCP checkpoint folder (torch, torchtitan) in as a checkpoint"
    )
    into.add_argument("folder", type=Path, help="the DCP folder (.metadata, *.distcp)")
    into.add_argument("--step", type=int, help="its step (default: its train_state.step)")
    into.add_argument(
        "--model-only", action="store_true", help="the weights alone: the optimizer starts anew"
    )
    into.set_defaults(action=cmd_import)
    for p in (export, into):
        p.add_argument(
            "--model",
            nargs="+",
            default=[],
            metavar="KEY=VALUE",
            help="the model that resumes it, as a run's model section names it (family=llama "
            "dim=64 ...), over RUN's config.yaml when RUN is a run directory: names and "
            "optimizer groups are checked and brought to it (torchtitan's names mapped)",
        )
    for p in (ls, verify, export, keep, into):
        p.add_argument("run", help="run directory, or checkpoint root path/URL")
    keep.add_argument("step", type=int, help="the step to keep (xirang ckpt ls lists them)")
    export.add_argument("out", nargs="?", type=Path, help="where to write (as -o)")
    return parser


def open_store(run: str) -> CheckpointStore:
    """The checkpoints of a run directory, or of a checkpoint root given directly."""
    if (Path(run) / CONFIG_FILE).is_file():
        config = _run_config(run, "")
        settings = CheckpointConfig(**(config.get("checkpoint") or {}))
        uri = checkpoint_uri(settings.uri, run)
        return CheckpointStore(open_tier(uri, config.get("storage"), get_registry()))
    if "://" not in run and not Path(run).is_dir():
        raise ConfigError(f"{run}: not a run directory (no {CONFIG_FILE}) nor a checkpoint folder")
    return CheckpointStore(open_tier(run, None, get_registry()))


def listing(store: CheckpointStore) -> list[dict[str, Any]]:
    """One row per step folder, newest first; torn or unreadable ones say why."""
    rows = []
    for cand in store.candidates():
        row: dict[str, Any] = {"step": cand.step, "kept": store.is_kept(cand.step)}
        if cand.manifest is None:
            row.update(state="refused" if cand.refused else "unusable", reason=cand.problem)
        else:
            m = cand.manifest
            row.update(
                state="committed",
                created=m.created,
                world_size=m.world_size,
                files=len(m.files),
                bytes_total=m.bytes_total,
                bytes_new=m.bytes_new,
                dataset_snapshot=m.dataset_snapshot,
            )
        rows.append(row)
    return rows


def cmd_ls(store: CheckpointStore, args: argparse.Namespace) -> int:
    rows = listing(store)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"checkpoints in {store.tier.path('')}")
    for column in ("step", "state", "created", "workers", "size MB", "new MB", "kept"):
        table.add_column(column)
    for r in rows:
        if r["state"] != "committed":
            table.add_row(str(r["step"]), f"[red]{r['reason']}[/]", "", "", "", "", "")
            continue
        table.add_row(
            str(r["step"]),
            r["state"],
            r["created"][:19],
            str(r["world_size"]),
            f"{r['bytes_total'] / 1e6:.2f}",
            f"{r['bytes_new'] / 1e6:.2f}",
            "yes" if r["kept"] else "",
        )
    Console().print(table if rows else "no checkpoints yet")
    return 0


def cmd_verify(store: CheckpointStore, args: argparse.Namespace) -> int:
    """Exit status 1 when any checked checkpoint is unusable or refused."""
    bad = 0
    for cand in store.candidates():
        if args.step is not None and cand.step != args.step:
            continue
        problem, refused = cand.problem, cand.refused
        if cand.manifest is not None:
            try:
                _check(store, cand.manifest)
            except CorruptCheckpoint as exc:
                problem, refused = str(exc), isinstance(exc, RefusedCheckpoint)
        bad += bool(problem)
        label = "REFUSED" if refused else "CORRUPT"
        print(f"step {cand.step}: " + (f"{label}: {problem}" if problem else "ok"))
    return 1 if bad else 0


def _check(store: CheckpointStore, manifest: Any) -> None:
    """Every chunk against the manifest, and the checkpoint loadable without a pickle (what
    export and resume will check again before they load it)."""
    store.verify(manifest)
    check_loadable(store.read_files(manifest, dcp_names(manifest.files)), f"step {manifest.step}")
    store.verify_dcp_folder(manifest)


def cmd_export(store: CheckpointStore, args: argparse.Namespace) -> int:
    manifest = pick_manifest(store, args.step)
    out = args.out or args.output
    if args.format == "torchtitan":
        target = target_model(args.run, args.model)
        if target is None:
            raise ConfigError(
                "--format torchtitan needs the model: a run directory, or --model family=..."
            )
        out = out or Path(args.run) / "torchtitan" / f"step-{manifest.step}"
        count = export_torchtitan(store, manifest, out, target)
    elif args.format == "dcp":
        out = out or Path(args.run) / f"dcp-step{manifest.step}"
        count = export_dcp(store, manifest, out)
    elif args.format == "peft":
        config = _run_config(args.run, "--format peft")
        out = out or Path(args.run) / f"adapter-step{manifest.step}"
        count = export_adapter(store, manifest, out, config.get("model") or {}, get_registry())
    elif args.format == "hf":
        config = _run_config(args.run, "--format hf")
        out = out or Path(args.run) / f"hf-step{manifest.step}"
        special = export_tokenizer(config, out)
        count = export_hf(store, manifest, out, config.get("model") or {}, get_registry(), special)
    else:
        out = out or Path(args.run) / f"model-step{manifest.step}.safetensors"
        count = export_safetensors(store, manifest, out)
    print(f"wrote {count} tensors of step {manifest.step} to {out}")
    return 0


def cmd_import(store: CheckpointStore, args: argparse.Namespace) -> int:
    target = target_model(args.run, args.model)
    result = import_folder(args.folder, store, args.step, target, args.model_only)
    print(f"imported {args.folder} as step {result.step}: {result.location}")
    return 0


def target_model(run: str, pairs: list[str]) -> TargetModel | None:
    """The model ``--model KEY=VALUE ...`` names, over the model section of RUN's
    ``config.yaml`` when RUN is a run directory; None when neither names one."""
    path = Path(run) / CONFIG_FILE
    base = (yaml.safe_load(path.read_text()) or {}).get("model") if path.is_file() else None
    section = dict(base or {})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--model {pair!r}: give KEY=VALUE (e.g. n_heads=32)")
        section[key.removeprefix("model.")] = yaml.safe_load(value)
    return TargetModel(section, get_registry()) if section else None


def _run_config(run: str, needs: str) -> dict[str, Any]:
    """A run directory's ``config.yaml``; ``needs`` says what asked for it."""
    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(
            f"{needs} needs a run directory (its {CONFIG_FILE} names the model); {run} has none"
        )
    return yaml.safe_load(path.read_text()) or {}


def cmd_keep(store: CheckpointStore, args: argparse.Namespace) -> int:
    try:
        store.mark(args.step, keep=not args.undo)
    except CorruptCheckpoint as exc:
        raise ConfigError(f"cannot mark step {args.step}: {exc}") from None
    print(f"step {args.step}: {'no longer kept' if args.undo else 'kept'}")
    return 0


def pick_manifest(store: CheckpointStore, step: int | None) -> Any:
    """The manifest of ``step``, or of the newest checkpoint that verifies; a refused one
    (unsigned under a key, needing a pickle) is an error, never silently passed over."""
    for cand in store.candidates():
        if step is not None and cand.step != step:
            continue
        if cand.refused:
            raise RefusedCheckpoint(cand.problem)
        if cand.manifest is None:
            continue
        try:
            _check(store, cand.manifest)
        except RefusedCheckpoint:
            raise
        except CorruptCheckpoint:
            continue
        return cand.manifest
    where = f"step {step}" if step is not None else "any step"
    raise ConfigError(f"no valid checkpoint for {where} in {store.tier.path('')}")
