"""Planner accuracy on this machine: predicted against measured peak memory and step time for
candidate splits of a GPT that does not fit one worker's memory share, on 4 CPU workers.

The host is measured first, as the planner does for ``parallel=auto`` here
(xirang_planner.calibrate: this model's layer per micro-batch size, how many of the 4
workers really compute at once, all-reduce per group size and point-to-point links, all in 4
gloo workers); then the planner ranks every valid split, the eight best distinct splits run
``STEPS`` steps each, and so does every 10th of the other fitting plans (lower-ranked ones the
planner did not favour, so ``pick_vs_best`` is measured against them too); prediction meets
measurement. Side by side: a model-states-only estimate (what DeepSpeed's ZeRO estimators
report) against the same measurements.

Memory is measured twice: ``meas`` is tensor accounting of the categories the predictor models
(states, saved activations, gathered parameters: xirang.planning.meter), ``real`` the
worker's real peak over its baseline (the process's peak resident set on a CPU, the allocator's
``max_memory_allocated`` on an accelerator: xirang.planning.memory_peak), which also holds what
the accounting cannot see: allocator overhead, temporaries, communication buffers, the autograd
graph. A plan that fails to run is reported with its error and counted, not dropped.

The machine may be loaded by other work while this runs: every timing, calibration and step
alike, is the best of its repeats (the figure load disturbs least), so the comparison is
like for like. Load also drifts over the run; two probes meant to divide it out (a
single-thread matmul beside each plan, and the calibration's concurrency probe in each plan's
workers) left the time error no better or made it worse (docs/parallel.md), so the predicted
step is compared as it is.

    python benchmarks/planner.py
    python benchmarks/planner.py --quick   # the 4 best distinct and every 30th other, 6 steps
Last line: ``mem_err_p50=<x> mem_err_real_p50=<x against the real peak> time_err_p50=<y>
pick_vs_best=<z> measured=<plans run> failed=<plans that failed>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace
from typing import Any

WORKERS = 4
STEPS = 12
DISTINCT = 8
EVERY = 10  # of the other fitting plans, every EVERY-th is run too
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
    global STEPS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer plans and steps")
    quick = parser.parse_args().quick
    distinct_count, every = (4, 30) if quick else (DISTINCT, EVERY)
    STEPS = 6 if quick else STEPS
    import torch
    from xirang_planner.calibrate import measure_host
    from xirang_planner.memory import predict_memory
    from xirang_planner.planner import rank_plans
    from xirang_planner.runtime_memory import cached_runtime

    from xirang.planning.smoke import run_plans
    from xirang_core.config import compose as compose_config
    from xirang_core.parallel.cluster import local_cluster
    from xirang_core.parallel.plan import MICRO_BATCHES, ParallelPlan
    from xirang_core.parallel.resolve import model_shape
    from xirang_core.plugins import get_registry

    torch.set_num_threads(1)
    registry = get_registry()
    config = compose_config(MODEL, registry)
    shape = model_shape(config, registry)
    global_batch = config["trainer"]["global_batch"]
    host = measure_host(config, WORKERS, list(MICRO_BATCHES))
    runtime = cached_runtime(config, WORKERS)
    replica = predict_memory(shape, ParallelPlan(dp=WORKERS, micro_batch=1), global_batch)
    most_runtime = runtime.base + max(runtime.added.values(), default=0)
    cluster = replace(
        local_cluster(WORKERS, registry),
        # a full replica's tensors per worker do not fit, whatever runtime a plan pays
        memory_gb=(0.75 * (replica.tensors + replica.buffers) + most_runtime) / 2**30,
    )
    ranking = rank_plans(shape, cluster, global_batch, WORKERS, host, runtime=runtime)
    picks = distinct(ranking.candidates, distinct_count)
    others = [c for c in ranking.candidates if c not in picks][every - 1 :: every]
    picks += others
    links = ", ".join(f"{g} ranks {link.describe()}" for g, link in sorted(host.links.items()))
    print(
        f"host: {host.slots:.2f} of {WORKERS} workers compute at once; all-reduce {links}; "
        f"p2p {host.p2p.describe()}"
    )
    added = ", ".join(f"{k} +{v / 2**20:.1f}" for k, v in runtime.added.items())
    print(
        f"runtime per worker (measured on trivial runs, cached): {runtime.base / 2**20:.1f} MiB"
        f" baseline; {added} MiB; allocator slack {runtime.slack_per_byte:.2f} B per byte of a"
        f" micro-batch's activations over {runtime.slack_from / 2**20:.2f} MiB"
    )
    print(
        f"memory per worker {cluster.memory_gb * 1024:.1f} MiB (full replica's tensors need "
        f"{(replica.tensors + replica.buffers) / 2**20:.1f}); {len(ranking.candidates)} plans fit, "
        f"{len(ranking.rejected)} rejected; cores {os.cpu_count()}; running the top "
        f"{len(picks) - len(others)} distinct and {len(others)} lower-ranked (every {every}th)"
    )
    columns = ("rank", "mem pred", "tensors", "meas", "real", "states-only", "t pred", "meas")
    print(f"{'plan':34s} " + " ".join(f"{c:>11s}" for c in columns))
    errors: dict[str, list[float]] = {"mem": [], "real": [], "states": [], "states_real": []}
    time_err, top_err, failed, measured, steps = [], [], [], [], []
    for c in picks:  # each row printed as its plan has run
        m = measure_alone(run_plans, config, c.plan)
        measured.append(m)
        rank = ranking.candidates.index(c) + 1
        if m is None:
            failed.append(c.plan.label())
            print(f"{c.plan.label():34s} {rank:11d} failed to run (error above)")
            continue
        states = c.memory.params + c.memory.grads + c.memory.optimizer
        real = m.real_peak_bytes or m.peak_bytes
        for key, predicted, against in (
            ("mem", c.memory.tensors, m.peak_bytes),
            ("real", c.memory.total, real),
            ("states", states, m.peak_bytes),
            ("states_real", states, real),
        ):
            errors[key].append(abs(predicted - against) / against)
        time_err.append((c.time.total - m.best_step_s) / m.best_step_s)
        top_err += [time_err[-1]] if c not in others else []
        steps.append(m.best_step_s)
        print(
            f"{c.plan.label():34s} {rank:11d} {c.memory.total / 2**20:10.2f}M "
            f"{c.memory.tensors / 2**20:10.2f}M {m.peak_bytes / 2**20:10.2f}M "
            f"{real / 2**20:10.2f}M {states / 2**20:10.2f}M "
            f"{c.time.total:11.4f} {m.best_step_s:11.4f}",
            flush=True,
        )
    ran = [m for m in measured if m is not None]
    best, top = min(steps), steps[0]
    print(
        "states-only estimate (peer baseline): "
        f"mem_err_p50={statistics.median(errors['states']):.3f} "
        f"mem_err_real_p50={statistics.median(errors['states_real']):.3f}"
    )
    print(f"failed plans: {', '.join(failed) or 'none'}")
    print(
        f"time error (predicted - measured) / measured: median {statistics.median(time_err):+.3f}"
        f", top distinct {statistics.median(top_err):+.3f}; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"mem_err_p50={statistics.median(errors['mem']):.3f} "
        f"mem_err_real_p50={statistics.median(errors['real']):.3f} "
        f"time_err_p50={statistics.median(abs(e) for e in time_err):.3f} "
        f"pick_vs_best={top / best:.3f} measured={len(ran)} failed={len(failed)}"
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
