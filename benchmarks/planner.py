"""Planner accuracy on this machine: predicted against measured peak memory and step time for
candidate splits of a GPT that does not fit one worker's memory share, on 4 CPU workers.

The collective links are calibrated first (xirang_core.comm's ring fit on 4 gloo workers), the
compute rate from this model's own layer; then the planner ranks every valid split, the eight
best distinct splits run 4 steps each, and prediction meets measurement. Side by side: a
model-states-only estimate (what DeepSpeed's ZeRO estimators report) against the same
measurements.

    python benchmarks/planner.py
Last line: ``mem_err_p50=<x> time_err_p50=<y> pick_vs_best=<z>``.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace

WORKERS = 4
STEPS = 4
DISTINCT = 8
MODEL = [
    "model.n_layer=4",
    "model.n_head=4",
    "model.n_embd=128",
    "model.max_seq_len=64",
    "data.seq_len=64",
    "trainer.global_batch=16",
    "parallel=auto",
    f"trainer.nproc={WORKERS}",
]


def main() -> None:
    import torch

    from xirang_core.comm.bench import collective_rows, fitted_links
    from xirang_core.config import compose as compose_config
    from xirang_core.parallel.cluster import local_cluster
    from xirang_core.parallel.memory import predict_memory
    from xirang_core.parallel.plan import ParallelPlan
    from xirang_core.parallel.planner import rank_plans
    from xirang_core.parallel.resolve import calibrated_rate, model_shape
    from xirang_core.parallel.smoke import run_plans
    from xirang_core.plugins import get_registry

    torch.set_num_threads(1)
    registry = get_registry()
    config = compose_config(MODEL, registry)
    shape = model_shape(config, registry)
    global_batch = config["trainer"]["global_batch"]
    link = fitted_links(collective_rows([WORKERS], [4096, 262144, 1048576], 5, 0.0))["all_reduce"]
    replica = predict_memory(shape, ParallelPlan(dp=WORKERS, micro_batch=1), global_batch).total
    cluster = replace(
        local_cluster(WORKERS, registry),
        latency_us=link.latency_s * 1e6,
        intra_gbps=link.bandwidth_bps / 1e9,
        inter_gbps=link.bandwidth_bps / 1e9,
        memory_gb=0.75 * replica / 2**30,  # a full replica per worker does not fit
    )
    ranking = rank_plans(
        shape, cluster, global_batch, WORKERS, calibrated_rate(config, WORKERS, concurrent=True)
    )
    picks = distinct(ranking.candidates, DISTINCT)
    measured = run_plans(config, [c.plan for c in picks], STEPS)
    print(
        f"link: {link.describe()}; memory per worker {cluster.memory_gb * 1024:.1f} MiB "
        f"(full replica needs {replica / 2**20:.1f}); {len(ranking.candidates)} plans fit, "
        f"{len(ranking.rejected)} rejected; cores {os.cpu_count()}"
    )
    columns = ("mem pred", "meas", "states-only", "t pred", "meas")
    print(f"{'plan':34s} " + " ".join(f"{c:>11s}" for c in columns))
    mem_err, time_err, states_err = [], [], []
    for c, m in zip(picks, measured, strict=True):
        states = c.memory.params + c.memory.grads + c.memory.optimizer
        mem_err.append(abs(c.memory.total - m.peak_bytes) / m.peak_bytes)
        states_err.append(abs(states - m.peak_bytes) / m.peak_bytes)
        time_err.append(abs(c.time.total - m.step_s) / m.step_s)
        print(
            f"{c.plan.label():34s} {c.memory.total / 2**20:10.2f}M {m.peak_bytes / 2**20:10.2f}M "
            f"{states / 2**20:10.2f}M {c.time.total:11.4f} {m.step_s:11.4f}"
        )
    best = min(m.step_s for m in measured)
    print(f"states-only estimate (peer baseline): mem_err_p50={statistics.median(states_err):.3f}")
    print(
        f"mem_err_p50={statistics.median(mem_err):.3f} "
        f"time_err_p50={statistics.median(time_err):.3f} "
        f"pick_vs_best={measured[0].step_s / best:.3f}"
    )


def distinct(candidates: list, count: int) -> list:
    """The best-ranked candidate of each distinct split (degrees, sp, zero, recompute)."""
    seen, picks = set(), []
    for c in candidates:
        p = c.plan
        key = (p.dp, p.tp, p.pp, p.sp, p.zero, p.recompute)
        if key not in seen:
            seen.add(key)
            picks.append(c)
        if len(picks) == count:
            break
    return picks


if __name__ == "__main__":
    main()
