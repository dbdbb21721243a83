"""``xirang plan``: rank the ways to split a model over a cluster.

    xirang plan model=gpt_125m cluster=dgx_h100 nodes=4
    xirang plan layers=48 hidden=6144 heads=48 vocab=50304 seq=2048 --json
    xirang plan model=gpt_small devices=4 --smoke   # here; runs the top plans
    xirang plan model=llama3_70b cluster=mixed_h100_a100_910b global_batch=512
    xirang plan model=llama3_8b cluster=dgx_h100:1+dgx_a100_80gb:2
    xirang plan model=llama3_8b cluster=dgx_h100 --verify   # top 2 at scale

Arguments are ``key=value``: ``model`` (a zoo option) or the shape (``layers hidden heads vocab
seq``, optional ``params``); ``cluster`` (``local`` = this host, default) and any cluster field
as an override (``nodes``, ``memory_gb``, ...); ``devices`` (default: the whole cluster; on this
host the worker count); ``global_batch``; ``seq`` overrides the model's sequence length; ``tp``
plans only that tensor-parallel degree.

A mixed cluster (a cluster file with ``groups``, or ``option:nodes`` joined by ``+``) is planned
as pipelines whose stages sit on different device types with uneven layer counts: the plan's
stages, the device type and layers of each, each type's share of the batch, the predicted step,
and the speedup over the best plan on any one type alone.

``--verify`` wraps the chosen plan and the next best for real at their world size, on torch's
fake process group under fake tensors, runs one training step and reports per rank the measured
parameters, gradients, optimizer state, peak memory and every collective's bytes on each mesh
dimension beside the planner's figures; a plan whose measured peak does not fit the device is
dropped from the ranking (pipeline plans are not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields, replace
from typing import Any

from xirang import ConfigError, get_registry
from xirang.planning import (
    MICRO_BATCHES,
    ClusterShape,
    ModelShape,
    help_text,
    local_cluster,
    model_shape,
    run_plans,
)
from xirang.planning import compose as compose_config
from xirang_planner.clusters import MixedCluster, cluster_names, load_cluster, with_overrides
from xirang_planner.planner import Candidate, Ranking, rank_plans
from xirang_planner.runtime_memory import cached_runtime

SHAPE_KEYS = {"layers", "hidden", "heads", "vocab", "seq", "params"}
RUN_KEYS = {"model", "cluster", "devices", "global_batch", "tp"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="xirang plan",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("settings", nargs="*", help="key=value (see above)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--top", type=int, default=10, help="rows to show (default 10)")
    parser.add_argument("--smoke", action="store_true", help="run the top plans here, measure")
    parser.add_argument("--smoke-top", type=int, default=3)
    parser.add_argument("--smoke-steps", type=int, default=3)
    parser.add_argument("--verify", action="store_true", help="wrap the top 2 at scale, measure")
    args = parser.parse_args(argv)
    kv = parse_settings(args.settings)
    config, shape = model_from(kv)
    global_batch = int(kv.get("global_batch", config["trainer"]["global_batch"]))
    devices = int(kv["devices"]) if "devices" in kv else None
    tp = _whole("tp", kv["tp"]) if "tp" in kv else None
    cluster = cluster_from(kv, devices)
    if isinstance(cluster, MixedCluster):
        return plan_mixed_cluster(args, config, shape, cluster, global_batch, kv, tp)
    if not cluster.shared and "seq" not in kv:
        shape = at_model_context(config, shape)
    host = runtime = None
    explicit_shape = bool((SHAPE_KEYS - {"seq", "params"}) & set(kv))
    if cluster.shared and not explicit_shape:
        check_probe_fits(kv.get("model", ""), shape, cluster)
        from xirang_planner.calibrate import measure_host

        # this host's workers share its cores: measure the zoo model's layer and the links,
        # and what a worker holds beyond its tensors (cached per host)
        host = measure_host(config, cluster.devices, list(MICRO_BATCHES))
        runtime = cached_runtime(config, cluster.devices)
    ranking = rank_plans(shape, cluster, global_batch, devices, host, runtime=runtime, tp=tp)
    verified = None
    if args.verify:
        from xirang_planner.verify import verify

        # before the report: a plan the measurement finds too large leaves the ranking
        memory, width = cluster.memory_bytes, cluster.dtype_bytes
        verified = verify(config, shape, ranking, global_batch, memory, width)
    report: dict[str, Any] = _report(shape, cluster, global_batch, ranking, args.top)
    if verified is not None:
        report["verify"] = verified
    if args.smoke:
        report["smoke"] = smoke(config, ranking, args.smoke_top, args.smoke_steps)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


def plan_mixed_cluster(
    args: argparse.Namespace,
    config: dict[str, Any],
    shape: ModelShape,
    cluster: MixedCluster,
    global_batch: int,
    kv: dict[str, str],
    tp: int | None,
) -> int:
    """``xirang plan`` on a mixed cluster: the mixed planner's split (:mod:`.mixed_report`)."""
    from xirang_planner.mixed_report import mixed_report, print_mixed

    if "devices" in kv or args.smoke:
        given = "devices=" if "devices" in kv else "--smoke"
        raise ConfigError(
            f"{given}: a mixed cluster is planned over all its devices, described, not run here; "
            f"change a group's nodes in the cluster (option:nodes) instead"
        )
    if "seq" not in kv:
        shape = at_model_context(config, shape)
    report = mixed_report(shape, cluster, global_batch, tp)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_mixed(report, _console())
    return 0


def _whole(key: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{key}={value}: must be a whole number >= 1")
    return int(value)


def _console() -> Any:
    from rich.console import Console

    # a pipe gets whole lines unless COLUMNS says how wide the reader's terminal is
    return Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 150)


#: the share of a worker's memory the host measurement may take (the rest: runtime, allocator)
PROBE_SHARE = 0.8


def probe_bytes(shape: ModelShape) -> int:
    """Memory one worker's host measurement takes: the model with one layer and without any
    (embeddings and head twice), each parameter with its gradient, in fp32."""
    rest = shape.params - shape.layers * shape.layer_size()
    return 2 * shape.dtype_bytes * (2 * rest + 2 * shape.layer_size())


def check_probe_fits(model: str, shape: ModelShape, cluster: ClusterShape) -> None:
    """A model too large to measure on this host is refused before any worker starts (eight
    workers measuring llama3_8b were killed by the host's OOM killer), naming what would do."""
    need, have = probe_bytes(shape), cluster.memory_gb * 2**30 * PROBE_SHARE
    if need > have:
        clusters = ", ".join(cluster_names())
        raise ConfigError(
            f"model={model}: measuring it on this host takes about {need / 2**30:.1f} GiB per "
            f"worker, and each of the {cluster.devices} worker(s) here has "
            f"{cluster.memory_gb:.1f} GiB; plan it for the hardware it will train on instead, "
            f"e.g. xirang plan model={model} cluster=dgx_h100 (clusters: {clusters})"
        )


def at_model_context(config: dict[str, Any], shape: ModelShape) -> ModelShape:
    """Planned for a cluster, a model trains at its own context length (llama3_8b: 8192), not at
    the 128 tokens of a run on this host; ``seq=N`` plans another."""
    context = int(config["model"].get("max_seq_len") or 0)
    return replace(shape, seq_len=context) if context > shape.seq_len else shape


def parse_settings(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ConfigError(
                f"'{item}': expected key=value, e.g. model=gpt_125m or cluster=dgx_h100"
            )
        out[key] = value
    return out


def model_from(kv: dict[str, str]) -> tuple[dict[str, Any], ModelShape]:
    """The run config (for smoke runs and defaults) and the model shape to plan for."""

    registry = get_registry()
    overrides = [f"model={kv['model']}"] if "model" in kv else []
    if "seq" in kv:
        overrides += [f"data.seq_len={kv['seq']}"]
    config = compose_config(overrides, registry)
    explicit = SHAPE_KEYS - {"seq", "params"}
    given = explicit & set(kv)
    if given and given != explicit:
        missing = ", ".join(sorted(explicit - given))
        raise ConfigError(f"a model shape needs layers, hidden, heads and vocab; missing {missing}")
    if given:
        return config, _explicit_shape(kv)
    shape = model_shape(config, registry)
    if shape is None:
        raise ConfigError(f"model={kv.get('model')}: its family declares no parallelize plan")
    return config, shape


def _explicit_shape(kv: dict[str, str]) -> ModelShape:
    layers, hidden = int(kv["layers"]), int(kv["hidden"])
    vocab, seq = int(kv["vocab"]), int(kv.get("seq", 2048))
    params = int(kv.get("params", layers * (12 * hidden * hidden + 4 * hidden) + vocab * hidden))
    return ModelShape(layers, hidden, int(kv["heads"]), vocab, seq, params)


def cluster_from(kv: dict[str, str], devices: int | None) -> ClusterShape | MixedCluster:
    overrides = {k: v for k, v in kv.items() if k not in SHAPE_KEYS | RUN_KEYS}
    known = {f.name for f in fields(ClusterShape)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        valid = ", ".join(sorted(SHAPE_KEYS | RUN_KEYS | known))
        raise ConfigError(f"{unknown[0]}: not a plan setting. Valid keys: {valid}")
    name = kv.get("cluster", "local")
    if name == "local":
        cluster = local_cluster(devices or 1)

        return with_overrides(cluster, overrides)
    return load_cluster(name, **overrides)


def smoke(config: dict[str, Any], ranking: Ranking, top: int, steps: int) -> list[dict[str, Any]]:
    """Run the top plans here; prediction against measurement for each."""

    chosen = [c for c in ranking.candidates[:top]]
    worlds = {c.plan.world for c in chosen}
    if len(worlds) != 1:
        raise ConfigError("--smoke runs plans of one world size; give devices=N")
    measured = run_plans(config, [c.plan for c in chosen], steps, profile=True)
    rows = [_compare(c, m) for c, m in zip(chosen, measured, strict=True)]
    fastest = min(rows, key=lambda r: r["measured_step_s"])
    for row in rows:
        row["measured_best"] = row is fastest
    return rows


def _compare(candidate: Candidate, m: Any) -> dict[str, Any]:
    return {
        "plan": candidate.plan.label(),
        "predicted_peak_bytes": candidate.memory.total,
        "measured_peak_bytes": m.peak_bytes,
        "real_peak_bytes": m.real_peak_bytes,
        "predicted_step_s": round(candidate.time.total, 5),
        "measured_step_s": round(m.step_s, 5),
        "time_shares": m.shares,
    }


def _report(
    shape: ModelShape, cluster: ClusterShape, global_batch: int, ranking: Ranking, top: int
) -> dict[str, Any]:
    reasons: dict[str, int] = {}
    for _, why in ranking.rejected:
        key = why.split(":")[0] if "needs" not in why else "does not fit in memory"
        reasons[key] = reasons.get(key, 0) + 1
    return {
        "model": shape.__dict__,
        "cluster": cluster.__dict__,
        "global_batch": global_batch,
        "ranked": [c.row() for c in ranking.candidates[:top]],
        "candidates": len(ranking.candidates),
        "rejected": reasons,
    }


def _print(report: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    console = _console()
    c, s = report["cluster"], report["model"]
    console.print(
        f"[bold]{s['layers']} layers, hidden {s['hidden']}, {s['heads']} heads, vocab "
        f"{s['vocab']}, seq {s['seq_len']}, {s['params'] / 1e6:.1f}M params[/] on "
        f"{c['name']}: {c['nodes']} x {c['devices_per_node']} {c['device']}, "
        f"{c['memory_gb']:.1f} GiB each; global batch {report['global_batch']}"
    )
    # no vertical rules and numbers without units: at 80 columns only the plan cell wraps
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("#", justify="right")
    table.add_column("plan", ratio=1)
    table.add_column("strategy")
    for header in ("GiB/dev", "step s", "tokens/s", "comm %", "bubble %"):
        table.add_column(header, justify="right")
    for i, row in enumerate(report["ranked"], 1):
        step = row["step_s"]
        table.add_row(
            str(i),
            row["plan"],
            row["parallel"]["name"],
            f"{row['memory_bytes']['total'] / 2**30:.2f}",
            f"{step['total']:.4f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{100 * step['comm'] / step['total']:.0f}",
            f"{100 * step['bubble'] / step['total']:.0f}",
        )
    console.print(table)
    rejected = ", ".join(f"{n} {why}" for why, n in report["rejected"].items()) or "none"
    console.print(f"{report['candidates']} plans fit; rejected: {rejected}")
    for row in report.get("verify", []):
        _print_verified(console, row)
    for row in report.get("smoke", []):
        mark = " <- measured best" if row["measured_best"] else ""
        console.print(
            f"smoke {row['plan']}: peak {row['real_peak_bytes'] / 2**20:.1f} MiB real, "
            f"{row['measured_peak_bytes'] / 2**20:.1f} MiB of tensors "
            f"(predicted {row['predicted_peak_bytes'] / 2**20:.1f}), step "
            f"{row['measured_step_s']:.4f} s (predicted {row['predicted_step_s']:.4f}), "
            f"shares {row['time_shares']}{mark}"
        )


def _print_verified(console: Any, row: dict[str, Any]) -> None:
    """One ``--verify`` plan: measured memory by part and bytes per mesh dimension, each
    beside the planner's figure."""
    m, p, gib = row["measured"], row["predicted"], 2**30
    fits = "" if row["fits"] else f" [bold red]does not fit: {row.get('note', 'dropped')}[/]"
    console.print(
        f"verify {row['plan']} on {m['world']} fake ranks ({m['seconds']:.0f} s): peak "
        f"{m['peak'] / gib:.2f} GiB (predicted {p['peak'] / gib:.2f}, ratio "
        f"{row['ratio']['peak']}); params {m['params'] / gib:.2f}, grads {m['grads'] / gib:.2f}, "
        f"optimizer {m['optimizer'] / gib:.2f}, activations at peak "
        f"{m['activations'] / gib:.2f} GiB{fits}"
    )
    for dim, nbytes in m["bytes_per_dim"].items():
        predicted = p["bytes_per_dim"].get(dim, 0.0)
        console.print(f"  {dim}: {nbytes / gib:.3f} GiB per step (predicted {predicted / gib:.3f})")
