"""Bytes per step and step time of each comm option against plain all-reduce, side by side.

Four gloo workers on this machine train the tiny GPT (gpt_tiny's shape) under DDP with 0.25 MB
buckets; bytes are counted at the collectives each option issues, over the timed steps (after
PowerSGD's plain-all-reduce warm-up). The last line is the issue's figure:

    powersgd_bytes_ratio=<x> fp16_bytes_ratio=<y> overlap_hidden_frac=<z>

with overlap_hidden_frac the share of plain all-reduce time hidden behind backward.
"""

from __future__ import annotations

import os
import warnings

from xirang_core.comm.launch import run_group
from xirang_core.comm.scaling import TrainSettings, train

WORKERS = int(os.environ.get("XIRANG_BENCH_WORKERS", "4"))
GPT_TINY = {"n_layer": 4, "n_head": 4, "n_embd": 128, "max_seq_len": 64, "vocab_size": 256}
OPTIONS = {
    "gloo": {},
    "fp16": {},
    "powersgd": {"rank": 4, "start_iter": 5},
}


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    results = {}
    for name, settings in OPTIONS.items():
        run = TrainSettings(
            option=name,
            option_settings=settings,
            steps=20,
            warmup_steps=5,
            micro_batch=4,
            model=dict(GPT_TINY),
            bucket_mb=0.25,
        )
        results[name] = run_group(train, WORKERS, run)[0]
    plain = results["gloo"]
    print(f"{'option':10s} {'bytes/step':>12s} {'ratio':>7s} {'step ms':>8s} {'hidden':>7s}")
    for name, r in results.items():
        print(
            f"{name:10s} {r['wire_bytes_per_step']:12.0f} "
            f"{r['wire_bytes_per_step'] / plain['wire_bytes_per_step']:7.3f} "
            f"{1000 * r['step_s']:8.1f} {r['comm']['overlap']['hidden_frac']:7.3f}"
        )
    ratio = {n: results[n]["wire_bytes_per_step"] / plain["wire_bytes_per_step"] for n in results}
    print(
        f"powersgd_bytes_ratio={ratio['powersgd']:.4f} fp16_bytes_ratio={ratio['fp16']:.4f} "
        f"overlap_hidden_frac={plain['comm']['overlap']['hidden_frac']:.4f}"
    )


if __name__ == "__main__":
    main()
