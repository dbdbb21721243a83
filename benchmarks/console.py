"""Console latency on a large pool, measured from a second process.

A real pool service (its engine and SQLite store) with 10,000 simulated devices (1,250 nodes of
8, four device types) and 1,000 jobs; the console serves that store. A separate client process
requests the main page, the queue page, the JSON API and /metrics with a project token and the
operator token, and reports p50/p95 per route. Side by side, the same client times the pool's
own REST API (``/v1/status``, ``/v1/jobs``) on the same state: the peer every console figure is
built from. Before that it times one cost-metering tick over the pool's history, incremental
against a full recomputation.

    python benchmarks/console.py [--requests 60]

The console serves requests from a snapshot of the pool store cached for ``ttl`` (2 s); the
request figures are therefore mostly cached ones. The snapshot rebuild a request pays when the
cache has expired (read the pool store, build the views) is timed on its own, 10 times, and
stands beside them on the last line.

Last line: ``console_p95_ms=<p95 over the console's main page and API> rebuild_p95_ms=<p95 of
the snapshot rebuild at this pool's size> devices=<devices in the pool>``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from xirang_service.console.metrics_store import MetricsStore
from xirang_service.console.server import serve as serve_console
from xirang_service.console.source import ConsoleSource
from xirang_service.console.state import read_state
from xirang_service.cost.meter import Meter
from xirang_service.cost.pool_metering import PoolMetering
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool.rest import serve as serve_pool
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore
from xirang_service.web.server import settle_heap

TYPES = {"h100": 4.0, "a100": 3.0, "v100": 1.2, "t4": 0.4}
OPERATOR_TOKEN = "bench-operator"
CLIENT = r"""
import json, sys, time, urllib.request
spec = json.loads(sys.argv[1])
out = {}
for label, url, token in spec["routes"]:
    times = []
    for _ in range(spec["requests"]):
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        times.append((time.perf_counter() - t0) * 1000)
    out[label] = times
print(json.dumps(out))
"""


def build_pool(folder: Path, jobs: int) -> tuple[PoolService, dict[str, str]]:
    """10,000 devices of four types, 20 projects in 5 teams, ``jobs`` jobs (most running)."""
    cluster = {
        "groups": [
            {"type": t, "nodes": 1250 // len(TYPES), "devices": 8, "nodes_per_leaf": 16}
            for t in TYPES
        ]
        + [{"type": "t4", "nodes": 1250 % len(TYPES), "devices": 8, "prefix": "t4x"}],
        "throughputs": {
            "reference": "a100",
            "speed": {"h100": 2, "a100": 1, "v100": 0.6, "t4": 0.5},
        },
        "projects": [
            {"name": f"p{i:02d}", "guaranteed": 400, "team": f"team{i % 5}"} for i in range(20)
        ],
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster))
    service = PoolService(PoolStore(folder / "pool.db"), path, "priority", OPERATOR_TOKEN)
    tokens = {"p00": service.set_quota(OPERATOR, "p00", {"rotate_token": True})["token"]}
    for i in range(jobs):
        service.submit(
            OPERATOR,
            {
                "project": f"p{i % 20:02d}",
                "cards": (1, 2, 4, 8, 16)[i % 5],
                "priority": ("low", "normal", "high")[i % 3],
                "name": f"job-{i}",
            },
        )
    service.drain(OPERATOR, "a100-0003", "NVLink errors")
    return service, tokens


def add_history(service: PoolService, rounds: int) -> None:
    """Finished work for metering to read: each round ends every other running job and
    submits as many new ones, so the usage table holds their closed segments."""
    for _ in range(rounds):
        ended = [j["id"] for j in service.jobs(OPERATOR, "running")][::2]
        for job_id in ended:
            service.complete(OPERATOR, job_id, True, {"utilisation": 0.5})
        for i, _ in enumerate(ended):
            body = {"project": f"p{i % 20:02d}", "cards": (1, 2, 4, 8)[i % 4]}
            service.submit(OPERATOR, body)


def metering_figures(store: PoolStore, repeats: int = 5) -> str:
    """Metering ticks two minutes apart: incremental (what the pool service and the console do
    now: segments closed since the last tick, plus running jobs) against a full recomputation
    over the whole history (what they did before)."""
    meter = Meter(PriceBook(TYPES))
    metering = PoolMetering(meter)
    start = time.time()
    metering.charges(store, start)  # the first tick reads everything once
    incremental, full = [], []
    for k in range(1, repeats + 1):
        now = start + 120.0 * k
        t0 = time.perf_counter()
        metering.charges(store, now)
        t1 = time.perf_counter()
        meter.pool_charges(read_state(store, now, usage=True), now)
        t2 = time.perf_counter()
        incremental.append((t1 - t0) * 1000)
        full.append((t2 - t1) * 1000)
    segments = len(read_state(store, usage=True).segments)
    return (
        f"metering tick ({segments} closed segments): incremental p50 "
        f"{percentile(incremental, 0.5):.0f} ms, full recomputation {percentile(full, 0.5):.0f} ms"
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--history", type=int, default=3, help="rounds of finished jobs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        service, tokens = build_pool(folder, args.jobs)
        add_history(service, args.history)
        print(
            f"pool: {service.engine.cluster.size} devices, {len(service.engine.jobs)} jobs "
            f"(built in {time.perf_counter() - t0:.1f} s)"
        )
        source = ConsoleSource(
            PoolStore(folder / "pool.db"),
            CostStore(folder / "cost.db"),
            MetricsStore(),
            Meter(PriceBook(TYPES)),
            OPERATOR_TOKEN,
        )
        source.sample()
        print(metering_figures(source.pool))
        cold = []
        for _ in range(10):  # what a request pays when the cached snapshot has expired
            source.ttl = 0.0
            t1 = time.perf_counter()
            source.snapshot()
            cold.append((time.perf_counter() - t1) * 1000)
        source.ttl = 2.0
        rebuild = percentile(cold, 0.95)
        print(f"snapshot rebuild (read pool store, build views): p95 {rebuild:.1f} ms")
        devices = service.engine.cluster.size
        console = serve_console(source)
        pool = serve_pool(service, "127.0.0.1", 0)
        settle_heap()  # as `xirang pool serve` and `xirang console` do before serving
        for server in (console, pool):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        c = "http://{}:{}".format(*console.server_address[:2])
        p = "http://{}:{}".format(*pool.server_address[:2])
        project = tokens["p00"]
        routes = [
            ("console /", f"{c}/", OPERATOR_TOKEN),
            ("console /jobs", f"{c}/jobs", OPERATOR_TOKEN),
            ("console /cost", f"{c}/cost", OPERATOR_TOKEN),
            ("console /api/overview", f"{c}/api/overview", OPERATOR_TOKEN),
            ("console /api/jobs (project)", f"{c}/api/jobs", project),
            ("console /metrics", f"{c}/metrics", OPERATOR_TOKEN),
            ("pool /v1/status", f"{p}/v1/status", OPERATOR_TOKEN),
            ("pool /v1/jobs", f"{p}/v1/jobs", OPERATOR_TOKEN),
        ]
        spec = json.dumps({"routes": routes, "requests": args.requests})
        answer = subprocess.run(
            [sys.executable, "-c", CLIENT, spec], capture_output=True, text=True, check=True
        )
        times = json.loads(answer.stdout)
        console.shutdown()
        pool.shutdown()
    print(f"{'route':32s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for label, values in times.items():
        print(f"{label:32s} {percentile(values, 0.5):8.1f} {percentile(values, 0.95):8.1f}")
    main_routes = [v for k, vs in times.items() if k.startswith("console") for v in vs]
    print(
        f"console_p95_ms={percentile(main_routes, 0.95):.1f} rebuild_p95_ms={rebuild:.1f} "
        f"devices={devices}"
    )


if __name__ == "__main__":
    main()
