"""Bytes per step and step time of each comm option against plain all-reduce, side by side.

Four gloo workers on this machine train the tiny GPT (gpt_tiny's shape) under DDP with 0.25 MB
buckets; bytes are counted at the collectives each option issues, over the timed steps (after
PowerSGD's plain-all-reduce warm-up), and so is the overlap (DDP's first backward runs in
buckets not yet rebuilt in gradient order).

Why the hidden share is what it is: plain all-reduce again at several bucket sizes, and with
half the workers (one core each on two cores). ``bound`` is 1 - (the last bucket's seconds from
its hand-over, when backward ends, to its completion, over all communication seconds): the last
bucket's transfer, and its wait behind earlier buckets still queued on gloo's one communication
thread, all come after backward, so this run's schedule could have hidden at most that much.
Each worker's compute and gloo's thread share the cores the machine has: four workers on two
cores give each worker half a core for both, and the backlog at the end of backward grows.

The last line is the issue's figure:

    powersgd_bytes_ratio=<x> fp16_bytes_ratio=<y> overlap_hidden_frac=<z> overlap_bound=<b>
    overlap_hidden_frac_1core=<2 workers> cores=<cores this process may use>

with overlap_hidden_frac the share of plain all-reduce time hidden behind backward.
"""

from __future__ import annotations

import os
import warnings

from xirang_comm.scaling import TrainSettings, train

from xirang.comm.launch import run_group

WORKERS = int(os.environ.get("XIRANG_BENCH_WORKERS", "4"))
GPT_TINY = {"n_layer": 4, "n_head": 4, "n_embd": 128, "max_seq_len": 64, "vocab_size": 256}
OPTIONS = {
    "gloo": {},
    "fp16": {},
    "powersgd": {"rank": 4, "start_iter": 5},
}


BUCKETS_MB = (0.1, 1.0, 25.0)  # beside the 0.25 MB of the main runs; 25 MB is DDP's default


def run(name: str, settings: dict, workers: int = WORKERS, bucket_mb: float = 0.25) -> dict:
    """Rank 0's figures of one training run under ``name``."""
    run = TrainSettings(
        option=name,
        option_settings=settings,
        steps=20,
        warmup_steps=5,
        micro_batch=4,
        model=dict(GPT_TINY),
        bucket_mb=bucket_mb,
    )
    return run_group(train, workers, run)[0]


def bound(result: dict) -> float:
    """The most of the communication any overlap could hide: all but the last bucket."""
    overlap = result["comm"]["overlap"]
    return 1.0 - overlap["last_bucket_s"] / overlap["comm_s"] if overlap["comm_s"] else 0.0


def why(plain: dict) -> dict:
    """Plain all-reduce's hidden share against bucket size and cores per worker."""
    rows = {(WORKERS, 0.25): plain}
    rows.update({(WORKERS, mb): run("gloo", {}, WORKERS, mb) for mb in BUCKETS_MB})
    rows[(2, 0.25)] = run("gloo", {}, 2, 0.25)
    print(
        f"{'workers':>7s} {'bucket MB':>9s} {'step ms':>8s} {'comm ms':>8s} {'hidden':>7s} "
        f"{'bound':>6s}"
    )
    for (workers, mb), r in rows.items():
        overlap = r["comm"]["overlap"]
        per_pass = 1000 * overlap["comm_s"] / max(1, overlap["backward_passes"])
        print(
            f"{workers:7d} {mb:9.2f} {1000 * r['step_s']:8.1f} {per_pass:8.1f} "
            f"{overlap['hidden_frac']:7.3f} {bound(r):6.3f}"
        )
    return rows


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    results = {name: run(name, settings) for name, settings in OPTIONS.items()}
    plain = results["gloo"]
    print(f"{'option':10s} {'bytes/step':>12s} {'ratio':>7s} {'step ms':>8s} {'hidden':>7s}")
    for name, r in results.items():
        print(
            f"{name:10s} {r['wire_bytes_per_step']:12.0f} "
            f"{r['wire_bytes_per_step'] / plain['wire_bytes_per_step']:7.3f} "
            f"{1000 * r['step_s']:8.1f} {r['comm']['overlap']['hidden_frac']:7.3f}"
        )
    ratio = {n: results[n]["wire_bytes_per_step"] / plain["wire_bytes_per_step"] for n in results}
    rows = why(plain)
    print(
        f"powersgd_bytes_ratio={ratio['powersgd']:.4f} fp16_bytes_ratio={ratio['fp16']:.4f} "
        f"overlap_hidden_frac={plain['comm']['overlap']['hidden_frac']:.4f} "
        f"overlap_bound={bound(plain):.4f} "
        f"overlap_hidden_frac_1core={rows[(2, 0.25)]['comm']['overlap']['hidden_frac']:.4f} "
        f"cores={len(os.sched_getaffinity(0))}"
    )


if __name__ == "__main__":
    main()
