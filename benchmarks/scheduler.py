"""The pool scheduler: whole-trace replay and decision latency, policies side by side.

1. Replay the whole Philly-derived trace (82k jobs) on a mixed K80/P100/V100 cluster with Gavel's
   measured per-(job type, device type) throughputs, under strict FIFO, FIFO with EASY backfill
   (the baseline: Slurm's default backfill, given exact run times, its most favourable case),
   the default priority/quota/least-attained-service policy and the heterogeneity-aware policy:
   the same engine and policy plugins `xirang pool serve` runs. Average, median and p95 JCT are
   compared at the same load; each replay's wall time is printed.
2. Decision latency: 10,000 devices, 5,000 queued jobs; the time of one scheduling pass of the
   default policy, measured over passes with completions and arrivals between them. It is the
   CPU time of the pass (``time.thread_time``), so other processes on a shared machine do not
   count; the replay time is wall-clock.

Last line: ``jct_vs_fifo=<fifo avg JCT / default avg JCT> jct_vs_fifo_backfill=<FIFO+EASY avg
JCT / default avg JCT> decision_p99_ms=<p99 pass> replay_s=<wall seconds of the default policy's
replay of the whole trace> replay_cpu_s=<its CPU seconds: what load from other processes
does not inflate>``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from rich.console import Console

from xirang_service.pool import clusterfile
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.policy import load_policy
from xirang_service.pool.report import comparison_table
from xirang_service.pool.sim import traces
from xirang_service.pool.sim.simulator import Simulator
from xirang_service.web.server import settle_heap

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "xirang_service" / "pool" / "clusters" / "gavel_mixed.yaml"


POLICIES = ("fifo", "fifo-backfill", "priority", "hetero")


def replay(trace_dir: Path, limit: int) -> list:
    """Every policy of ``POLICIES`` over the same jobs."""
    data = clusterfile.read(CLUSTER)
    data["throughputs"]["gavel"] = str(trace_dir / "gavel_throughputs/simulation_throughputs.json")
    _, throughputs, _ = clusterfile.build(dict(data))
    jobs = traces.load(
        trace_dir / "philly_jobs/philly.csv", throughputs.classes(), 0, limit or None
    )
    return [Simulator(data, policy).run(jobs) for policy in POLICIES]


def decision_latency(devices: int, queued: int, passes: int, seed: int = 0) -> list[float]:
    """CPU seconds per scheduling pass with ``queued`` jobs waiting on ``devices`` devices."""
    rng = random.Random(seed)
    per_type = devices // 8 // 3
    data = {
        "groups": [
            {"type": t, "nodes": per_type, "devices": 8, "prefix": t}
            for t in ("a100", "h100", "mi300")
        ],
        "throughputs": {"reference": "a100", "speed": {"a100": 1.0, "h100": 2.0, "mi300": 1.5}},
        "projects": [{"name": f"team{i}", "guaranteed": devices // 12} for i in range(10)],
    }
    cluster, throughputs, quotas = clusterfile.build(data)
    engine = PoolEngine(cluster, throughputs, load_policy("priority"), quotas)
    sizes = [1] * 70 + [2] * 10 + [4] * 10 + [8] * 8 + [16] * 1 + [64] * 1
    now = 0.0

    def submit() -> None:
        engine.submit(
            f"team{rng.randrange(10)}", rng.choice(sizes), now, priority=rng.choice((0, 1, 1, 1, 2))
        )

    while len(engine.running) < devices // 3 or len(engine.queue) < queued:
        submit()
        if len(engine.queue) >= queued:
            engine.schedule(now)
    settle_heap()  # as `xirang pool serve` does once its state is restored, before serving
    timings = []
    for _ in range(passes):
        now += 60.0
        running = [j.id for j in engine.running_jobs()]
        for job_id in rng.sample(running, min(len(running), 20)):
            engine.complete(job_id, now)
        while len(engine.queue) < queued:
            submit()
        start = time.thread_time()
        engine.schedule(now)
        timings.append(time.thread_time() - start)
        engine.events.clear()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--traces",
        default=str(REPO.parent / "shared" / "traces"),
        help="folder of the shared traces (default ../shared/traces)",
    )
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N jobs")
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--queued", type=int, default=5_000)
    parser.add_argument("--passes", type=int, default=300)
    args = parser.parse_args()

    cpu = time.process_time()
    results = replay(Path(args.traces), args.limit)
    Console().print(comparison_table([r.row() for r in results], baseline="fifo-backfill"))
    for r in results:
        print(
            f"{r.policy:>14s}: JCT mean {r.avg_jct_h:.2f} h, median {r.p50_jct_h:.3f} h, "
            f"p95 {r.p95_jct_h:.2f} h; replay {r.wall_s:.1f} s wall, {r.cpu_s:.1f} s CPU"
        )
    fifo, easy, default, hetero = results
    timings = sorted(decision_latency(args.devices, args.queued, args.passes))
    p99 = timings[min(len(timings) - 1, int(0.99 * len(timings)))] * 1000
    print(
        f"replayed {default.jobs} jobs under each policy; hetero-aware avg JCT "
        f"{easy.avg_jct_h / hetero.avg_jct_h:.2f}x better than FIFO+EASY (replay "
        f"{hetero.wall_s:.1f} s); decision median "
        f"{statistics.median(timings) * 1000:.2f} ms over {len(timings)} passes; "
        f"process CPU {time.process_time() - cpu:.0f} s in all"
    )
    print(
        f"jct_vs_fifo={fifo.avg_jct_h / default.avg_jct_h:.2f} "
        f"jct_vs_fifo_backfill={easy.avg_jct_h / default.avg_jct_h:.2f} decision_p99_ms={p99:.2f} "
        f"replay_s={default.wall_s:.1f} replay_cpu_s={default.cpu_s:.1f}"
    )


if __name__ == "__main__":
    main()
