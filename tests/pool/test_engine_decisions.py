"""The policies' decisions, pinned: engine speed-ups must not change who runs where and when.

The bundled 1k-job Philly sample is replayed under every built-in policy on a small mixed
cluster (so jobs queue, backfill and preempt); each job's completion time is digested and
compared with the figures the engine gave before its indices were made incremental.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import xirang_service
from tests.pool.conftest import make_engine
from xirang_service.pool import lazyindex
from xirang_service.pool.sim import traces
from xirang_service.pool.sim.simulator import Simulator

TRACE = Path(xirang_service.__file__).parent / "pool" / "traces" / "philly_1k.csv"
CLUSTER = {
    "groups": [
        {"type": "k80", "nodes": 3, "devices": 8, "domain_size": 4},
        {"type": "p100", "nodes": 2, "devices": 8, "domain_size": 4},
        {"type": "v100", "nodes": 2, "devices": 8},
    ],
    "projects": [{"name": "6214e9", "guaranteed": 16}],
    "throughputs": {
        "reference": "p100",
        "max_inflation": 4,
        "speed": {"k80": 0.5, "p100": 1.0, "v100": 1.6},
        "classes": {
            "cnn": {"k80": 0.3, "p100": 1.0, "v100": 2.5},
            "lm": {"k80": 0.6, "p100": 1.0, "v100": 1.2},
        },
    },
}

#: policy -> (finished, preemptions, mean JCT h, p95 JCT h, digest of every job's JCT)
PINNED = {
    "fifo": (998, 0, "104.439731", "497.502856", "d681bda4e702ef48"),
    "fifo-backfill": (998, 0, "18.898004", "53.476865", "2eee432cc557e339"),
    "priority": (998, 267, "11.118835", "33.156407", "f7edea1b5c0ca4dd"),
    "hetero": (998, 302, "9.389449", "21.513380", "6a7af333fc34f4eb"),
}


@pytest.mark.parametrize("policy", sorted(PINNED))
def test_policy_decisions_on_the_bundled_trace_are_unchanged(policy: str) -> None:
    jobs = traces.load(TRACE, ["cnn", "lm"], seed=0)
    result = Simulator(CLUSTER, policy).run(jobs)
    digest = hashlib.sha256(repr(sorted(result.jct_by_job.items())).encode()).hexdigest()[:16]
    got = (
        result.finished,
        result.preemptions,
        f"{result.avg_jct_h:.6f}",
        f"{result.p95_jct_h:.6f}",
        digest,
    )
    assert got == PINNED[policy]


def _burst(monkeypatch: pytest.MonkeyPatch, share: int) -> tuple[list, dict, dict]:
    """Jobs of two projects started together cross a service level together; the running
    indices after that demotion burst, rebuilt when read if 1/``share`` of them or more moved."""
    monkeypatch.setattr(lazyindex, "REBUILD_SHARE", share)
    projects = [{"name": "a", "guaranteed": 12}, {"name": "b", "guaranteed": 4}]
    engine = make_engine(nodes=8, devices=4, projects=projects, las_thresholds=(1.0, 8.0))
    for i in range(30):
        engine.submit("ab"[i % 2], 1 + i % 2, float(i % 3), priority=i % 3)
    engine.schedule(3.0)
    assert len(engine.running) > 8 and engine._borrowed["gpu"]  # some run borrowed
    engine.schedule(3.0 + 3600.0)  # the 1-card jobs pass 1 card-hour, the 2-card ones too
    own = {k: list(v) for k, v in engine._own.items() if v}
    return list(engine.running), own, {k: list(v) for k, v in engine._borrowed.items()}


def test_a_demotion_burst_rebuilds_the_indices_as_moving_each_job_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moved = _burst(monkeypatch, 0)  # every demoted job moved on its own
    rebuilt = _burst(monkeypatch, 10**9)  # any demotion rebuilds
    assert rebuilt == moved
    assert any(key[1] == 1 for key, _ in moved[0])  # the burst did demote
    assert moved[0] == sorted(moved[0])
