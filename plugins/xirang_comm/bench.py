"""``xirang bench comm``: collective timings, scaling efficiency per comm option, bytes per step,
the bottleneck, and cost-model predictions, written as tables and a plot into a run directory.

    xirang bench comm                          # 1, 2, 4 gloo workers here
    xirang bench comm --workers 1,2 --options gloo,fp16 --steps 10
    xirang bench comm --cluster cluster.yaml   # and that cluster's predictions
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from xirang import ConfigError, get_registry, help_text
from xirang.comm import OPS, ClusterDescription, Link, bus_bandwidth, fit_link, run_group
from xirang_comm import bench_report
from xirang_comm.scaling import TrainSettings, time_collectives, train

BENCHES = ("comm",)


def main(argv: list[str]) -> int:
    """``xirang bench <what>``: the only benchmark so far is ``comm``."""
    if argv[:1] in (["-h"], ["--help"]):
        _parser().print_help()  # the one benchmark's help
        return 0
    if not argv or argv[0] not in BENCHES:
        raise ConfigError(f"usage: xirang bench <what> [options]; <what> is one of {BENCHES}")
    args = _parser().parse_args(argv[1:])
    results = run_comm_bench(args)
    folder = bench_report.write(results, Path(args.out or _default_out()))
    bench_report.show(results, folder)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="xirang bench comm",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", default="1,2,4", help="worker counts; 1 is the baseline")
    p.add_argument("--options", default="gloo,fp16,powersgd,topk", help="comm options to scale")
    p.add_argument("--sizes", default="4096,65536,1048576,4194304", help="message bytes")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per collective")
    p.add_argument("--steps", type=int, default=20, help="training steps per scaling run")
    p.add_argument("--cluster", help="YAML cluster description for predictions")
    p.add_argument("--predict-workers", default="8,16,64,256", help="worker counts to predict")
    p.add_argument("--predict-sizes", default="16777216,268435456", help="bytes to predict")
    p.add_argument("--out", help="run directory (default outputs/bench-comm/<time>)")
    return p


def run_comm_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The whole procedure; returns every figure the report writes."""
    workers = _ints(args.workers, "--workers")
    sizes = _ints(args.sizes, "--sizes")
    stated = stated_bandwidth()
    rows = collective_rows([p for p in workers if p > 1], sizes, args.reps, stated)
    links = fitted_links(rows)
    scaling = scaling_rows(workers, args.options.split(","), args.steps)
    grad_bytes = max((r["wire_bytes_per_step"] for r in scaling), default=0.0)
    cluster = local_cluster(links, workers)
    if args.cluster:
        cluster = ClusterDescription.load(args.cluster)
    predictions = predict(
        cluster,
        _ints(args.predict_workers, "--predict-workers"),
        _ints(args.predict_sizes, "--predict-sizes"),
    )
    return {
        "stated_bandwidth_bps": stated,
        "collectives": rows,
        "fitted_links": {op: vars(link) for op, link in links.items()},
        "scaling": scaling,
        "bytes_per_step_plain": grad_bytes,
        "bottleneck": bottleneck(rows, scaling),
        "cluster": {
            "nodes": cluster.nodes,
            "devices_per_node": cluster.devices_per_node,
            "intra": cluster.intra.describe(),
            "inter": cluster.inter.describe(),
            "source": args.cluster or "fitted on this machine",
        },
        "predictions": predictions,
    }


def stated_bandwidth() -> float:
    """Bytes/s the topology states for the host's link, else the host's measured memory
    bandwidth (loopback gloo moves bytes through memory)."""
    device = get_registry().create("device", {"name": "cpu"})
    group = device.topology().group_of(0)
    if group is not None and group.bandwidth_gbps:
        return group.bandwidth_gbps * 1e9
    calibration = device.calibrate()
    return (calibration.link_bandwidth_gbps or calibration.memory_bandwidth_gbps) * 1e9


def progress(what: str) -> None:
    """One line on stderr per measurement: the whole bench takes minutes."""
    print(f"bench comm: {what} ...", file=sys.stderr, flush=True)


def collective_rows(
    worlds: list[int], sizes: list[int], reps: int, stated: float
) -> list[dict[str, Any]]:
    rows = []
    for world in worlds:
        progress(f"timing collectives on {world} workers ({len(sizes)} sizes, {reps} reps)")
        for row in run_group(time_collectives, world, sizes, reps)[0]:
            bw = bus_bandwidth(row["op"], row["bytes"], world, row["seconds"])
            rows.append({**row, "bus_gbps": bw / 1e9, "of_stated": bw / stated if stated else 0})
    return rows


def fitted_links(rows: list[dict[str, Any]]) -> dict[str, Link]:
    links = {}
    for op in OPS:
        samples = [(r["bytes"], r["world"], r["seconds"]) for r in rows if r["op"] == op]
        if len({(n, p) for n, p, _ in samples}) >= 2:
            links[op] = fit_link(op, samples)
    return links


def scaling_rows(workers: list[int], options: list[str], steps: int) -> list[dict[str, Any]]:
    """Tokens/s of one worker, then each option at each worker count, with efficiency."""
    settings = TrainSettings(steps=steps, warmup_steps=min(5, steps // 2))
    progress(f"training {steps} steps on 1 worker (the baseline)")
    base = run_group(train, 1, settings)[0]
    rows = [{**base, "efficiency": 1.0, "hidden_frac": None, "bottleneck": None}]
    for option in options:
        extra = {"start_iter": max(2, settings.warmup_steps)} if option == "powersgd" else {}
        for world in (p for p in workers if p > 1):
            run = TrainSettings(
                option=option,
                option_settings=extra,
                steps=steps,
                warmup_steps=settings.warmup_steps,
            )
            progress(f"training {steps} steps with {option} on {world} workers")
            result = run_group(train, world, run)[0]
            comm = result.pop("comm")
            rows.append(
                {
                    **result,
                    "efficiency": result["tokens_per_s"] / (world * base["tokens_per_s"]),
                    "hidden_frac": comm["overlap"]["hidden_frac"],
                    "bottleneck": comm["bottleneck"],
                }
            )
    return rows


def local_cluster(links: dict[str, Link], workers: list[int]) -> ClusterDescription:
    """This machine as a one-level cluster, with the all-reduce link fitted from its timings."""
    link = links.get("all_reduce") or Link(1e-4, 1e9)
    return ClusterDescription(1, max(workers), link, link)


def predict(cluster: ClusterDescription, worlds: list[int], sizes: list[int]) -> list[dict]:
    return [
        {"op": op, "bytes": size, "world": world, **cluster.predict(op, size, world)}
        for op in OPS
        for size in sizes
        for world in worlds
    ]


def bottleneck(rows: list[dict[str, Any]], scaling: list[dict[str, Any]]) -> str:
    """The collective and level that cost the most time in the largest plain run."""
    plain = [r for r in scaling if r.get("bottleneck")]
    if plain:
        worst = max(plain, key=lambda r: (r["world"], -r["efficiency"]))
        return f"{worst['bottleneck']} ({worst['option']}, {worst['world']} workers)"
    slowest = max(rows, key=lambda r: r["seconds"], default=None)
    return f"{slowest['op']}@world" if slowest else "n/a"


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag}={text!r}: expected comma-separated integers") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{flag}={text!r}: expected positive integers")
    return values


def _default_out() -> str:
    import os

    root = os.environ.get("XIRANG_RUNS", "outputs")
    return f"{root}/bench-comm/{time.strftime('%Y%m%d-%H%M%S')}"
