"""The Prometheus ``/metrics`` exposition: the console's figures with standard names and labels.

Gauges for capacity, allocation, water level, queue and quota, and for the console's 30-day cost
view (``xirang_cost_30d``: it drops as charges age out of the window); counters (``_total``)
for all-time cost in currency units, which only grow, so ``rate()`` never sees a false reset.
Running pool jobs that name their ``run_dir`` also export their training live (step, loss,
tokens/s, MFU), read from the newest record of the run's ``metrics.jsonl``, and the tokens
trained so far as a counter: the furthest any record of the file reached, since a worker that
restarts resumes from its last checkpoint and logs fewer tokens than before for a while.
A job is labelled ``pool_job``, never ``job`` or ``instance``: Prometheus sets those itself on
every scraped series (the scrape job, the target) and renames a clashing label ``exported_job``.
A project token gets its own project's series only; the operator gets all.
The text is prometheus_client's own exposition of metric families, collected once per snapshot (a
custom collector: the figures are read from the pool and cost stores, not kept in-process).
"""

from __future__ import annotations

import io
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from xirang_core.train.report import METRICS_FILE
from xirang_service.console.auth import OPERATOR
from xirang_service.console.source import ConsoleSource
from xirang_service.cost.money import from_micro
from xirang_service.pool.jobs import JobState

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

Sample = tuple[dict[str, str], float]
KINDS = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


def exposition(source: ConsoleSource, who: str) -> str:
    """The whole exposition text for ``who`` (built once per snapshot of the stores)."""
    return source.per_viewer("metrics", who, lambda: _exposition(source, who))


def _exposition(source: ConsoleSource, who: str) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape(source, who))
    return generate_latest(registry).decode()


class _Scrape:
    """The families one scrape by ``who`` sees (a prometheus_client collector)."""

    def __init__(self, source: ConsoleSource, who: str) -> None:
        self.source, self.who = source, who

    def collect(self) -> Iterator[Metric]:
        source, who = self.source, self.who
        snap = source.snapshot()
        families = [
            *_capacity_families(snap.capacity, snap.nodes),
            *_job_families(source.jobs_for(who)),
            _quota_family(source.quotas_for(who)),
            *_cost_families(source, who),
            *_training_families(source, who),
        ]
        for family in families:
            yield _family(*family)


def _capacity_families(capacity: dict[str, Any], nodes: list[dict[str, Any]]) -> list[tuple]:
    types, groups = capacity["types"], capacity["groups"]

    def per_type(key: str) -> list[Sample]:
        return [({"device_type": r["device_type"]}, r[key]) for r in types]

    drained = sum(1 for n in nodes if not n["healthy"])
    return [
        ("xirang_pool_devices", "gauge", "Devices in the pool.", per_type("total")),
        ("xirang_pool_devices_healthy", "gauge", "Devices on healthy nodes.", per_type("healthy")),
        ("xirang_pool_devices_allocated", "gauge", "Devices held by jobs.", per_type("allocated")),
        (
            "xirang_pool_utilisation_ratio",
            "gauge",
            "Allocated share of healthy devices (water level).",
            per_type("water_level"),
        ),
        (
            "xirang_pool_group_utilisation_ratio",
            "gauge",
            "Water level per interconnect group.",
            [
                ({"device_type": r["device_type"], "group": r["group"]}, r["water_level"])
                for r in groups
            ],
        ),
        ("xirang_pool_nodes_drained", "gauge", "Nodes out of service.", [({}, drained)]),
    ]


def _job_families(jobs: list[dict[str, Any]]) -> list[tuple]:
    queued: dict[str, int] = defaultdict(int)
    running: dict[str, int] = defaultdict(int)
    for job in jobs:
        (queued if job["state"] == "queued" else running)[job["project"]] += 1
    return [
        ("xirang_pool_queue_length", "gauge", "Queued jobs.", _by("project", queued)),
        ("xirang_pool_jobs_running", "gauge", "Running jobs.", _by("project", running)),
    ]


def _quota_family(quotas: list[dict[str, Any]]) -> tuple:
    samples = [
        ({"project": q["project"], "kind": kind}, q[kind])
        for q in quotas
        for kind in ("guaranteed", "in_guarantee", "borrowed", "lent")
    ]
    return ("xirang_pool_quota_cards", "gauge", "Quota use in logical cards.", samples)


def _cost_families(source: ConsoleSource, who: str) -> list[tuple]:
    amount: dict[tuple[str, ...], int] = defaultdict(int)
    idle: dict[tuple[str, ...], int] = defaultdict(int)
    for c in source.charges_for(who):  # the console's 30-day window
        key = (c.team, c.project, c.device_type, c.currency)
        amount[key] += c.amount_micro
        idle[key] += c.idle_micro
    totals = source.costs.totals(None if who == OPERATOR else who)
    all_amount = [(row[:4], row[4]) for row in totals]
    all_idle = [(row[:4], row[5]) for row in totals]
    budgets = [
        ({"scope": b["scope"], "name": b["name"]}, b["used"]) for b in source.budgets_for(who)
    ]
    return [
        (
            "xirang_cost",
            "counter",
            "Metered cost, all time, in currency units.",
            _money(all_amount),
        ),
        (
            "xirang_cost_idle",
            "counter",
            "Idle cost inside allocations, all time.",
            _money(all_idle),
        ),
        ("xirang_cost_30d", "gauge", "Metered cost of the last 30 days.", _money(amount.items())),
        ("xirang_cost_idle_30d", "gauge", "Idle cost of the last 30 days.", _money(idle.items())),
        ("xirang_budget_used_ratio", "gauge", "Share of each budget spent.", budgets),
    ]


def _money(rows: Iterable[tuple[tuple[str, ...], int]]) -> list[Sample]:
    """Micro-units per (team, project, device_type, currency) as labelled currency units."""
    names = ("team", "project", "device_type", "currency")
    return [(dict(zip(names, k, strict=True)), float(from_micro(v))) for k, v in sorted(rows)]


#: (metrics.jsonl field, metric, type, help) of a running job's training
TRAINING = (
    ("step", "xirang_train_step", "gauge", "Last optimizer step the run logged."),
    ("loss", "xirang_train_loss", "gauge", "Training loss at that step."),
    ("tokens_per_s", "xirang_train_tokens_per_second", "gauge", "Training throughput."),
    ("mfu", "xirang_train_mfu_ratio", "gauge", "Model FLOPs utilisation (0 when unknown)."),
    (
        "tokens",
        "xirang_train_tokens",
        "counter",
        "Tokens trained on so far (the furthest reached).",
    ),
)
#: how much of the end of metrics.jsonl is read for its newest record
TAIL_BYTES = 16384


def _training_families(source: ConsoleSource, who: str) -> list[tuple]:
    rows: list[tuple[dict[str, str], dict[str, Any]]] = []
    for job in source.snapshot().state.live_jobs():
        run_dir = job.payload.get("run_dir")
        if job.state is not JobState.RUNNING or not run_dir:
            continue
        if who != OPERATOR and job.project != who:
            continue
        record = latest_record(Path(run_dir)) or {}
        # a running job that has logged nothing yet has trained 0 tokens: its counter starts
        # at 0, so increase() counts the first record's tokens too
        record = {**record, "tokens": TOKENS_SEEN.furthest(Path(run_dir) / METRICS_FILE)}
        rows.append(({"pool_job": str(job.id), "project": job.project}, record))
    return [
        (name, kind, text, [(labels, r[key]) for labels, r in rows if _number(r.get(key))])
        for key, name, kind, text in TRAINING
    ]


class FurthestTokens:
    """The most ``tokens`` any record of a ``metrics.jsonl`` logged, read on from where the
    last scrape stopped. A resumed worker logs from its checkpoint's step again, so its newest
    record can hold fewer tokens than an earlier one; the counter stays at the furthest, which
    never goes down while the file grows (an exporter that restarts reads the file again)."""

    def __init__(self) -> None:
        self.read: dict[Path, tuple[int, int, int]] = {}  # path -> (inode, offset, furthest)

    def furthest(self, path: Path) -> int:
        try:
            with path.open("rb") as stream:
                inode = os.fstat(stream.fileno()).st_ino
                known, offset, most = self.read.get(path, (inode, 0, 0))
                if known != inode or stream.seek(0, io.SEEK_END) < offset:
                    offset, most = 0, 0  # a new file in its place: read it from the start
                stream.seek(offset)
                whole, newline, _ = stream.read().rpartition(b"\n")  # a line cut short waits
        except OSError:
            return 0
        for line in whole.splitlines():
            most = max(most, _tokens(line))
        self.read[path] = (inode, offset + len(whole) + len(newline), most)
        return most


def _tokens(line: bytes) -> int:
    """The ``tokens`` of a training record (0 for any other line)."""
    try:
        record = json.loads(line)
    except ValueError:
        return 0
    tokens = record.get("tokens") if isinstance(record, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0


#: one per exporter process: each scrape reads only what metrics files gained since the last
TOKENS_SEEN = FurthestTokens()


def latest_record(run_dir: Path) -> dict[str, Any] | None:
    """The newest training record of a run's ``metrics.jsonl``, read from the file's end (a
    long run's file is large; a line cut short by a writer mid-way is passed over)."""
    try:
        with (run_dir / METRICS_FILE).open("rb") as stream:
            size = stream.seek(0, io.SEEK_END)
            stream.seek(max(0, size - TAIL_BYTES))
            tail = stream.read()
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "tokens_per_s" in record:
            return record
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _by(label: str, table: dict[str, int]) -> list[Sample]:
    return [({label: k}, v) for k, v in sorted(table.items())]


def _family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> Metric:
    """One family; a counter's samples carry ``_total`` (prometheus_client adds it)."""
    samples = list(samples)
    labels = list(samples[0][0]) if samples else []
    family = KINDS[kind](name, help_text, labels=labels)
    for values, value in samples:
        family.add_metric([str(values[k]) for k in labels], float(value))
    return family
