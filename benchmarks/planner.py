"""Planner accuracy on this machine: predicted against measured peak memory and step time for
candidate splits of a GPT that does not fit one worker's memory share, on 4 CPU workers.

The host is measured first, as the planner does for ``parallel=auto`` here
(xirang_core.parallel.calibrate: this model's layer per micro-batch size, how many of the 4
workers really compute at once, all-reduce per group size and point-to-point links, all in 4
gloo workers); then the planner ranks every valid split, the eight best distinct splits run
``STEPS`` steps each, and prediction meets measurement. Side by side: a model-states-only
estimate (what DeepSpeed's ZeRO estimators report) against the same measurements.

The machine may be loaded by other work while this runs: every timing, calibration and step
alike, is the best of its repeats (the figure load disturbs least), so the comparison is
like for like.

    python benchmarks/planner.py
Last line: ``mem_err_p50=<x> time_err_p50=<y> pick_vs_best=<z>``.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from typing import Any

WORKERS = 4
STEPS = 12
DISTINCT = 8
MODEL = [
    "model=gpt_tiny",
    "tokenizer=bytes",
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

    from xirang_core.config import compose as compose_config
    from xirang_core.parallel.calibrate import measure_host
    from xirang_core.parallel.cluster import local_cluster
    from xirang_core.parallel.memory import predict_memory
    from xirang_core.parallel.plan import MICRO_BATCHES, ParallelPlan
    from xirang_core.parallel.planner import rank_plans
    from xirang_core.parallel.resolve import model_shape
    from xirang_core.parallel.smoke import run_plans
    from xirang_core.plugins import get_registry

    torch.set_num_threads(1)
    registry = get_registry()
    config = compose_config(MODEL, registry)
    shape = model_shape(config, registry)
    global_batch = config["trainer"]["global_batch"]
    host = measure_host(config, WORKERS, list(MICRO_BATCHES))
    replica = predict_memory(shape, ParallelPlan(dp=WORKERS, micro_batch=1), global_batch).total
    cluster = replace(
        local_cluster(WORKERS, registry),
        memory_gb=0.75 * replica / 2**30,  # a full replica per worker does not fit
    )
    ranking = rank_plans(shape, cluster, global_batch, WORKERS, host)
    picks = distinct(ranking.candidates, DISTINCT)
    measured = [measure_alone(run_plans, config, c.plan) for c in picks]
    links = ", ".join(f"{g} ranks {link.describe()}" for g, link in sorted(host.links.items()))
    print(
        f"host: {host.slots:.2f} of {WORKERS} workers compute at once; all-reduce {links}; "
        f"p2p {host.p2p.describe()}"
    )
    print(
        f"memory per worker {cluster.memory_gb * 1024:.1f} MiB "
        f"(full replica needs {replica / 2**20:.1f}); {len(ranking.candidates)} plans fit, "
        f"{len(ranking.rejected)} rejected; cores {os.cpu_count()}"
    )
    columns = ("mem pred", "meas", "states-only", "t pred", "meas")
    print(f"{'plan':34s} " + " ".join(f"{c:>11s}" for c in columns))
    mem_err, time_err, states_err = [], [], []
    for c, m in zip(picks, measured, strict=True):
        if m is None:
            print(f"{c.plan.label():34s} failed to run (excluded)")
            continue
        states = c.memory.params + c.memory.grads + c.memory.optimizer
        mem_err.append(abs(c.memory.total - m.peak_bytes) / m.peak_bytes)
        states_err.append(abs(states - m.peak_bytes) / m.peak_bytes)
        time_err.append(abs(c.time.total - m.best_step_s) / m.best_step_s)
        print(
            f"{c.plan.label():34s} {c.memory.total / 2**20:10.2f}M {m.peak_bytes / 2**20:10.2f}M "
            f"{states / 2**20:10.2f}M {c.time.total:11.4f} {m.best_step_s:11.4f}"
        )
    best = min(m.best_step_s for m in measured if m is not None)
    print(f"states-only estimate (peer baseline): mem_err_p50={statistics.median(states_err):.3f}")
    print(
        f"mem_err_p50={statistics.median(mem_err):.3f} "
        f"time_err_p50={statistics.median(time_err):.3f} "
        f"pick_vs_best={next(m for m in measured if m).best_step_s / best:.3f}"
    )


def measure_alone(run_plans: Any, config: dict, plan: Any) -> Any:
    """One plan in its own fresh workers (no state carried from another plan's run); None
    when it fails, so one broken split does not hide the others' figures."""
    try:
        return run_plans(config, [plan], STEPS)[0]
    except Exception as exc:  # reported, and the plan left out
        print(f"{plan.label()}: {type(exc).__name__}: {str(exc).strip()[:200]}")
        return None


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
