"""The pool under chaos, on loopback, bounded in time: two ``xirang pool serve`` replicas on a
throwaway PostgreSQL (its own cluster, in a temporary folder, as tests/pool/postgres.py makes
it), one leading by the store's lease, the other standing by, with

- ``--clients`` client threads submitting (each with an idempotency key, retried with it after
  a lost answer, a refused connection or a 503, until acknowledged; ``PoolClient`` given both
  replicas' URLs, one round over them per attempt, so ``p99_submit_ms`` times one attempt as
  before) and cancelling what they submitted, spread over eight projects;
- one tenant hammering reads (``/v1/jobs/<id>/charge``, ``/v1/jobs?state=queued``) from 8
  threads;
- ``--kills`` kill -9s of the leader, each followed by the killed replica's restart as the new
  standby (as a supervisor would), the next kill once it stands by; ``failover_s`` is the time
  from the kill until the standby acknowledges a write (a probe submitting to it every 50 ms);
- ``--db-restarts`` PostgreSQL restarts (stopped 3 s, then started; the replicas are not);
- a slow-body attacker: another process holding ``--attack`` connections to the leader from
  127.0.0.2, each a valid POST head and then one body byte every 5 s, reconnecting whatever
  the server cuts (by default more than the server's 4096 connections, so only the
  per-address limit and the whole-body deadline keep the others served).

One after the other (kills, then database restarts, then the attack for a third of
``--duration``), then every acknowledged job is looked up in the store. Last, with the
clients stopped and the jobs they left in the pool, another tenant submits and cancels one job
at a time for ``--fair-s`` seconds alone, then as long again while a tenant hammers reads from
another process (8 threads): its submit p99 idle and hammered. Then the list phases
(benchmarks/pool_chaos_lists.py): a new tenant stores 500 jobs of 60 KB (a 30 MB listing);
``--slow-readers`` connections ask for it and read nothing for ``--slow-s`` seconds while the
leader's resident memory is sampled; then the probing tenant's submit p99 alone, and while
that tenant reads its whole listing page after page in a loop from another process. Where
there are several CPUs, the serving replica runs on all but the last and the tenants' clients
on the last, the hammering or listing one below the probe's priority, as tenants' clients on
machines of their own.

    python benchmarks/pool_chaos.py [--duration 45] [--clients 200] [--kills 4] [--attack 5000]
        [--slow-readers 60] [--slow-s 10]

Last line: ``acked=<jobs acknowledged> lost=<acknowledged, not in the store>
duplicated=<jobs beyond the first for one idempotency key> phantom=<jobs in the store no client
saw acknowledged> p99_submit_ms=<p99 of acknowledged submit requests> failover_s=<longest time
from a kill -9 of the leader to the standby acknowledging a write> db_outage_503_s=<longest
time writes still failed after the database was back> slow_attack_ok_ratio=<share of
legitimate requests answered during the attack> submit_p99_idle_ms=<another tenant's submit
p99, alone> submit_p99_hammered_ms=<the same while a tenant hammers reads>
submit_p99_hammered_rated_ms=<the same once the operator gave that tenant a rate of 20/s>
slurm_stall_p99_ratio=<a tenant's submit p99 while slurmctld is stopped / idle>
double_runs=<pool jobs with two Slurm jobs that ran> ghost_runs=<Slurm jobs that ran after
their pool job ended> cancel_pending_p99_ms=<p99 of DELETEs of jobs Slurm held pending>
slow_reader_rss_mib=<the leader's peak resident memory with the slow readers>
big_list_p99_ratio=<the probe's submit p99 while a tenant lists 30 MB / alone>``: the four
from ``slurm_stall_p99_ratio`` come from benchmarks/pool_chaos_slurm.py's phase on the Slurm
test bed (``--stall-s`` seconds of SIGSTOP; ``nan``, with the reason, where this machine has
no Slurm or is not root). Answers of 500, the memory before the slow readers and the two p99s
of the big list are on the line before.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# the pool tests' throwaway PostgreSQL (initdb in a temporary folder), from the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import pool_chaos_lists as chaos_lists
from benchmarks.pool_chaos_slurm import phase as slurm_phase
from tests.pool import postgres
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.store import PoolStore

OPERATOR = "chaos-operator"
PROJECTS = [f"p{i}" for i in range(10)]
ATTACKER = r"""
import socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
head = (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 10000\r\n\r\n")
def one():
    try:
        s = socket.create_connection(("127.0.0.1", port), 2, ("127.0.0.2", 0))
        s.sendall(head)
        return s
    except OSError:
        return None
socks = [one() for _ in range(count)]
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(5)
    for i, s in enumerate(socks):
        try:
            s.sendall(b" ")
        except (OSError, AttributeError):
            if s is not None:
                s.close()
            socks[i] = one()
"""


@dataclass
class Tally:
    """What the clients saw, shared by their threads (list appends are atomic)."""

    acked: list[tuple[str, int]] = field(default_factory=list)  # (key, job id)
    submit_ms: list[float] = field(default_factory=list)
    requests: list[tuple[float, bool]] = field(default_factory=list)  # (start, answered)
    errors_500: list[str] = field(default_factory=list)
    writes_ok: list[float] = field(default_factory=list)  # times of acknowledged submits


#: the Slurm phase's figures on the last line (the others go on the line before)
SLURM_LAST = ("slurm_stall_p99_ratio", "double_runs", "ghost_runs", "cancel_pending_p99_ms")
#: the hammering tenant's request rate for the last fairness phase (docs/pool.md's example)
HAMMER_RATE = 20

HAMMER = r"""
import sys, threading, urllib.request
url, token, job, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
import time
end = time.monotonic() + seconds
def get(path):
    request = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except OSError:
        time.sleep(0.05)
def loop():
    while time.monotonic() < end:
        get("/v1/jobs?state=queued")
        get(f"/v1/jobs/{job}/charge")
threads = [threading.Thread(target=loop) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
"""


class Service:
    """One ``xirang pool serve`` replica in its own process on one port, killed and restarted."""

    def __init__(self, folder: Path, store: str, cluster: Path) -> None:
        self.folder, self.store, self.cluster = folder, store, cluster
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        """Start it; the status it answers first (200 leading, 503 standing by)."""
        env = {**os.environ, "XIRANG_HOME": str(self.folder)}
        env["XIRANG_POOL_OPERATOR_TOKEN"] = OPERATOR
        command = [sys.executable, "-m", "xirang", "pool", "serve", "--store", self.store]
        command += ["--cluster", str(self.cluster), "--port", str(self.port)]
        log = (self.folder / f"serve-{self.port}.log").open("ab")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        while True:
            try:
                return status(self.url)
            except OSError:
                if self.process.poll() is not None:
                    raise SystemExit(log.name + " ended") from None
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def status(url: str) -> int:
    """The status of GET /v1/status at ``url`` (OSError: nothing answers)."""
    request = urllib.request.Request(url + "/v1/status")
    request.add_header("Authorization", f"Bearer {OPERATOR}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except urllib.error.URLError as exc:
        raise OSError(str(exc.reason)) from None


def client(urls: list[str], token: str, stop: threading.Event, tally: Tally) -> None:
    """Submit, retrying with the same key until acknowledged, then cancel; repeat."""
    pool = PoolClient(urls, token, timeout=30, retry_s=0)  # one round: the loop retries
    while not stop.is_set():
        key = uuid.uuid4().hex
        job_id = submit(pool, key, stop, tally)
        if job_id is not None:
            answered(pool, tally, lambda job_id=job_id: pool.cancel(job_id))


def submit(pool: PoolClient, key: str, stop: threading.Event, tally: Tally) -> int | None:
    """The job made under ``key``, once the pool acknowledges it (None: stopped first)."""
    while True:
        started = time.monotonic()
        try:
            job = pool.call("POST", "/v1/jobs", {"cards": 1, "name": key}, {"Idempotency-Key": key})
        except PoolError as exc:
            note(tally, started, exc)
            if stop.is_set():
                return None
            time.sleep(0.2)
            continue
        now = time.monotonic()
        tally.requests.append((started, True))
        tally.submit_ms.append((now - started) * 1000)
        tally.writes_ok.append(now)
        tally.acked.append((key, job["id"]))
        return job["id"]


def note(tally: Tally, started: float, exc: PoolError) -> None:
    """A failed request: answered (a 4xx) or not (a 503, a lost answer, no connection)."""
    unanswered = exc.status in (500, 503) or str(exc).startswith(("lost the", "cannot reach"))
    tally.requests.append((started, not unanswered))
    if exc.status == 500:
        tally.errors_500.append(str(exc))


def answered(pool: PoolClient, tally: Tally, call) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    try:
        call()
        tally.requests.append((started, True))
    except PoolError as exc:
        note(tally, started, exc)


def reader(urls: list[str], token: str, stop: threading.Event, tally: Tally) -> None:
    """A tenant hammering the read routes: the queue, and the charge of a job of its own."""
    pool = PoolClient(urls, token, timeout=30, retry_s=0)  # one round: the loop retries
    job_id = submit(pool, uuid.uuid4().hex, stop, tally)
    while not stop.is_set():
        answered(pool, tally, lambda: pool.call("GET", "/v1/jobs?state=queued"))
        answered(pool, tally, lambda: pool.charge(job_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=45.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--attack", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--db-restarts", type=int, default=2)
    parser.add_argument("--fair-s", type=float, default=6.0)
    parser.add_argument("--stall-s", type=float, default=20.0)
    parser.add_argument("--pending-cancels", type=int, default=10)
    parser.add_argument("--slow-readers", type=int, default=60)
    parser.add_argument("--slow-s", type=float, default=10.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="xirang-chaos-"))
    cluster = folder / "cluster.json"
    projects = [{"name": p, "guaranteed": 4} for p in PROJECTS]
    nodes = {"type": "gpu", "nodes": 10, "devices": 4}
    cluster.write_text(json.dumps({"groups": [nodes], "projects": projects}))
    with postgres.cluster() as server:
        store = postgres.fresh_database(server, "chaos")
        run(args, folder, store, server, cluster)


def run(args: argparse.Namespace, folder: Path, store: str, server: str, cluster: Path) -> None:
    replicas = [Service(folder, store, cluster), Service(folder, store, cluster)]
    assert replicas[0].start() == 200 and replicas[1].start() == 503  # leader, standby
    urls = [r.url for r in replicas]
    operator = PoolClient(urls, OPERATOR)
    tokens = [operator.call("PUT", f"/v1/projects/{p}", {})["token"] for p in PROJECTS]
    tally, stop = Tally(), threading.Event()
    threads = [
        threading.Thread(target=client, args=(urls, tokens[i % 8], stop, tally))
        for i in range(args.clients)
    ] + [threading.Thread(target=reader, args=(urls, tokens[9], stop, tally)) for _ in range(8)]
    for thread in threads:
        thread.start()
    began, third = time.monotonic(), args.duration / 3
    failover = [fail_over(replicas, tokens[8]) for _ in pause_each(args.kills, 1.0)]
    outage = [restart_database(server, tally) for _ in pause_each(args.db_restarts, third)]
    left = began + args.duration - time.monotonic()  # restarts may have overrun their third
    window = attack(leader(replicas).port, args.attack, max(third, left))
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    fair = fairness(leader(replicas), tokens[8], tokens[9], args.fair_s)
    listed = lists(leader(replicas), tokens[8], args.slow_readers, args.slow_s, args.fair_s)
    for replica in replicas:
        replica.kill()
    slurm = slurm_phase(args.fair_s, args.stall_s, args.pending_cancels)
    report(tally, store, failover, outage, window, fair, listed, slurm)


def pause_each(times: int, seconds: float):  # type: ignore[no-untyped-def]
    """``times`` evenly spread over ``seconds``: sleep, then yield."""
    for _ in range(times):
        time.sleep(seconds / (times + 1))
        yield
    time.sleep(seconds / (times + 1))


def leader(replicas: list[Service]) -> Service:
    """The replica that leads now (waiting for one)."""
    while True:
        for replica in replicas:
            try:
                if status(replica.url) == 200:
                    return replica
            except OSError:
                pass
        time.sleep(0.05)


def fail_over(replicas: list[Service], token: str) -> float:
    """kill -9 the leader; seconds until the standby acknowledges a write (a probe's submit
    every 50 ms, each at most once: no retries hide the time). The killed one is then
    started again, and stands by, before the next kill."""
    old = leader(replicas)
    standby = next(r for r in replicas if r is not old)
    killed = time.monotonic()
    old.kill()
    probe = PoolClient(standby.url, token, timeout=30, retry_s=0)
    while True:
        try:
            probe.submit(cards=1, name=f"probe-{uuid.uuid4().hex}")
            break
        except PoolError:
            time.sleep(0.05)
    took = time.monotonic() - killed
    assert old.start() == 503, "the restarted replica should stand by"
    return took


def restart_database(server: str, tally: Tally) -> float:
    """Stop PostgreSQL for 3 s; seconds from its return to the next acknowledged submit."""
    postgres.stop(server)
    time.sleep(3)
    postgres.start(server)
    back = time.monotonic()
    while not any(t > back for t in tally.writes_ok[-50:]):
        time.sleep(0.05)
    return min(t for t in tally.writes_ok if t > back) - back


def attack(port: int, connections: int, seconds: float) -> tuple[float, float]:
    """The slow-body attacker for ``seconds``; the window legitimate requests were timed in
    (from when its connections are open)."""
    attacker = subprocess.Popen(
        [sys.executable, "-c", ATTACKER, str(port), str(connections), str(seconds)]
    )
    start = time.monotonic() + min(3.0, seconds / 4)  # its connections are open
    attacker.wait()
    return start, time.monotonic()


def fairness(
    served: Service, token: str, hammerer: str, seconds: float
) -> tuple[float, float, float]:
    """Another tenant's submit p99 (ms) alone, then while ``hammerer`` hammers reads from
    another process (so the two share no interpreter here), the clients kept :func:`apart`
    from the service."""
    url = served.url
    with apart(served) as cpus:
        pool = PoolClient(url, token, timeout=30)
        idle = probe_submits(pool, seconds)
        hammer = PoolClient(url, hammerer)
        mine = hammer.submit(cards=1, name="probe-hammer")["id"]
        hammering = [sys.executable, "-c", HAMMER, url, hammerer, str(mine), str(seconds + 2)]
        hammered = [probe_hammered(pool, hammering, seconds, cpus)]
        project = hammer.job(mine)["project"]
        limit = {"rate": HAMMER_RATE, "burst": 2 * HAMMER_RATE}
        PoolClient(url, OPERATOR).call("PUT", f"/v1/projects/{project}", limit)
        hammered.append(probe_hammered(pool, hammering, seconds, cpus))
    return idle, hammered[0], hammered[1]


def lists(
    served: Service, token: str, readers: int, slow_s: float, seconds: float
) -> tuple[float, float, float, float]:
    """The list phases: a new tenant stores a 30 MB listing (benchmarks/pool_chaos_lists.py);
    ``readers`` slow readers of it for ``slow_s`` seconds; then another tenant's (``token``)
    submit p99 alone and while that tenant reads its whole listing in a loop from another
    process, the clients kept :func:`apart` from the service. The service's resident memory
    (MiB) before the readers and at their peak, and the two p99s (ms)."""
    assert served.process is not None
    lister = PoolClient(served.url, OPERATOR).call("PUT", "/v1/projects/lists", {})["token"]
    chaos_lists.fill(PoolClient(served.url, lister))
    before = chaos_lists.rss_mib(served.process.pid)
    peak = max(chaos_lists.slow_readers(served.url, lister, readers, slow_s, served.process.pid))
    with apart(served) as cpus:
        pool = PoolClient(served.url, token, timeout=30)
        idle = probe_submits(pool, seconds)
        listing = [sys.executable, "-c", chaos_lists.LISTER, served.url, lister, str(seconds + 2)]
        listed = probe_hammered(pool, listing, seconds, cpus)
    return before, peak, idle, listed


@contextmanager
def apart(served: Service) -> Iterator[list[int]]:
    """On a machine of several CPUs, the serving replica (every thread of it) on all but the
    last one and the clients (this process, and those started with the CPUs yielded) on the
    last: a tenant's client runs on its own machine, so what is measured is what the service
    gives the other tenant, not how the clients' processes share this machine's CPUs. Yields
    those CPUs ([] on one CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield []
        return
    assert served.process is not None
    for thread in os.listdir(f"/proc/{served.process.pid}/task"):
        os.sched_setaffinity(int(thread), cpus[:-1])
    os.sched_setaffinity(0, cpus[-1:])
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, cpus)


def probe_hammered(pool: PoolClient, command: list[str], seconds: float, cpus: list[int]) -> float:
    """The probe's submit p99 while ``command`` (a tenant's client, below the probe's
    priority, on the clients' CPU) loads the service from another process."""
    hammer = subprocess.Popen(command, preexec_fn=lambda: _apart(cpus[-1:]))
    time.sleep(1.0)  # its threads are reading
    hammered = probe_submits(pool, seconds)
    hammer.wait()
    return hammered


def _apart(cpus: list[int]) -> None:
    """The hammering client's process: on ``cpus`` (all when empty), and yielding them to any
    other process that wants them (the database's, the service's), as a client on its own
    machine takes nothing from the service's."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.nice(19)


def probe_submits(pool: PoolClient, seconds: float) -> float:
    """Submit and cancel one job at a time for ``seconds``; the submits' p99 in ms."""
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        job = pool.submit(cards=1, name="probe")
        times.append((time.monotonic() - started) * 1000)
        pool.cancel(job["id"])
    return p99(times)


def p99(ms: list[float]) -> float:
    ms = sorted(ms)
    return ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")


def report(
    tally: Tally,
    location: str,
    failover: list[float],
    outage: list[float],
    window: tuple[float, float],
    fair: tuple[float, float, float],
    listed: tuple[float, float, float, float],
    slurm: dict[str, str],
) -> None:
    store = PoolStore(location)
    jobs = [job for job in store.jobs() if not job.name.startswith(("probe", chaos_lists.NAMED))]
    store.close()
    names = Counter(job.name for job in jobs)
    acked_keys = {key for key, _ in tally.acked}
    stored_ids = {job.id for job in jobs}
    lost = sum(job_id not in stored_ids for _, job_id in tally.acked)
    duplicated = sum(n - 1 for n in names.values() if n > 1)
    phantom = sum(name not in acked_keys for name in names)
    during = [ok for started, ok in tally.requests if window[0] <= started <= window[1]]
    print(
        f"requests={len(tally.requests)} errors_500={len(tally.errors_500)} "
        f"attack_requests={len(during)} failovers={[round(f, 2) for f in failover]} "
        f"db_returns={[round(o, 2) for o in outage]} rss_before_slow_readers_mib={listed[0]:.0f} "
        f"submit_p99_idle_lists_ms={listed[2]:.1f} submit_p99_big_list_ms={listed[3]:.1f} "
        + " ".join(f"{k}={v}" for k, v in slurm.items() if k not in SLURM_LAST)
    )
    print(
        f"acked={len(tally.acked)} lost={lost} duplicated={duplicated} phantom={phantom} "
        f"p99_submit_ms={p99(tally.submit_ms):.1f} failover_s={max(failover, default=0):.2f} "
        f"db_outage_503_s={max(outage, default=0):.2f} "
        f"slow_attack_ok_ratio={sum(during) / max(1, len(during)):.4f} "
        f"submit_p99_idle_ms={fair[0]:.1f} submit_p99_hammered_ms={fair[1]:.1f} "
        f"submit_p99_hammered_rated_ms={fair[2]:.1f} "
        + " ".join(f"{k}={slurm[k]}" for k in SLURM_LAST)
        + f" slow_reader_rss_mib={listed[1]:.0f} big_list_p99_ratio={listed[3] / listed[2]:.2f}"
    )


if __name__ == "__main__":
    main()
