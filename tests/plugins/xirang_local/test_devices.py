"""Placement on healthy local devices: what a probe drains or a stale heartbeat gives away is
never placed again, and the worker count stays one the run's batch and plan divide over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from xirang_local.devices import LocalDevices, fits, largest_fit

from xirang.specs import HealthFinding
from xirang_core.checkpoint.events import record_event


class Probe:
    """A device backend whose probe answers what the test sets (a plugin's test double)."""

    shareable = False

    def __init__(self) -> None:
        self.findings: list[HealthFinding] = []

    def health(self) -> list[HealthFinding]:
        return self.findings


def config(global_batch: int = 8, micro: int = 1, **parallel: Any) -> dict[str, Any]:
    return {
        "trainer": {"global_batch": global_batch, "micro_batch": micro},
        "parallel": {"name": "x", **parallel},
    }


def devices(count: int, **kw: Any) -> LocalDevices:
    return LocalDevices(Probe(), list(range(count)), False, config(**kw))


def test_a_drained_device_is_never_placed_again() -> None:
    local = devices(4)
    assert local.place(4) == [0, 1, 2, 3]
    local.backend.findings = [HealthFinding(2, "ecc", "drain", "uncorrectable errors")]
    assert [e.device for e in local.probe()] == [2]
    assert local.probe() == []  # reported once
    local.backend.findings = []
    assert local.place(4) == [0, 1]  # 3 healthy; global_batch 8 divides over 2, not 3


def test_a_warning_is_not_a_drain() -> None:
    local = devices(2)
    local.backend.findings = [HealthFinding(1, "temp", "warn", "hot")]
    assert local.probe() == [] and local.place(2) == [0, 1]


def test_a_drain_of_every_device_leaves_no_placement() -> None:
    local = devices(2)
    local.backend.findings = [HealthFinding(None, "driver", "drain", "driver gone")]
    assert [e.device for e in local.probe()] == [0, 1]
    assert local.place(2) == []


def test_the_device_of_a_worker_that_hung_is_evicted(tmp_path: Path) -> None:
    local = devices(4)
    record_event(tmp_path, "hang", rank=0, step=3, reason="an earlier attempt")
    placed = local.place(4)
    record_event(tmp_path, "hang", rank=1, step=9, reason="rank 1 made no progress")
    evicted = local.evict_failed(placed, str(tmp_path), since=1)
    assert [(e.device, e.reason) for e in evicted] == [(1, "rank 1 made no progress")]
    assert local.place(4) == [0, 2]


def test_a_shareable_device_is_used_by_every_worker() -> None:
    local = LocalDevices(Probe(), [0], True, config())
    assert local.place(2) == [0, 0]


@given(most=st.integers(1, 16), batch=st.integers(1, 64), micro=st.integers(1, 8))
def test_largest_fit_is_the_most_workers_that_divide_the_batch(
    most: int, batch: int, micro: int
) -> None:
    settings = config(batch, micro)
    n = largest_fit(most, settings)
    assert n <= most
    assert all(not fits(k, settings) for k in range(n + 1, most + 1))
    if n:
        assert batch % n == 0 and (batch // n) % micro == 0


def test_fixed_parallel_degrees_bound_the_worker_count() -> None:
    assert largest_fit(3, config(tp=2, dp=0, pp=1)) == 2  # tp 2, dp takes the rest
    assert largest_fit(8, config(tp=2, dp=2, pp=1)) == 4  # every degree fixed: exactly 4
    assert largest_fit(3, config(tp=2, dp=2, pp=1)) == 0
