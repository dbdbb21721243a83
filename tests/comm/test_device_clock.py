"""Collective and overlap timings on NCCL come from device events, not the host clock: an NCCL
future completes when the collective is queued, so the host sees no time pass.

Hand-written fake (no GPU here): a device with a compute stream and a communication stream, each
a clock of device seconds. ``torch.cuda.Event.record`` stamps the current stream's time; a
collective starts on the comm stream once the compute queued before it is done. Its future is
completed by the test the way a CUDA future runs callbacks: with the comm stream current (the
caller's stream waits for the collective), while host time does not move at all."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from xirang.comm.counting import Collectives, WireLedger
from xirang.comm.overlap import OverlapMeter


class FakeDevice:
    def __init__(self) -> None:
        self.stream_time = {"compute": 0.0, "comm": 0.0}
        self.current = "compute"

    def compute(self, seconds: float) -> None:
        self.stream_time["compute"] += seconds

    def collective(self, seconds: float) -> None:
        start = max(self.stream_time["comm"], self.stream_time["compute"])
        self.stream_time["comm"] = start + seconds

    def complete(self, fut: torch.futures.Future, value: Any) -> None:
        """Run ``fut``'s callbacks with the comm stream current, as a CUDA future does."""
        self.current = "comm"
        fut.set_result(value)
        self.current = "compute"


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    dev = FakeDevice()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at: float | None = None

        def record(self) -> None:
            self.at = dev.stream_time[dev.current]

        def query(self) -> bool:
            return self.at is not None

        def synchronize(self) -> None:
            assert self.at is not None

        def elapsed_time(self, end: Event) -> float:
            return (end.at - self.at) * 1000.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    return dev


class QueuedWork:
    """An NCCL work object: its future is handed out before the transfer has run."""

    def __init__(self) -> None:
        self.future: torch.futures.Future = torch.futures.Future()

    def get_future(self) -> torch.futures.Future:
        return self.future


def launcher(monkeypatch: pytest.MonkeyPatch, device: FakeDevice, *seconds: float) -> list:
    """``dist.all_reduce`` queueing collectives of the given device seconds, one per call."""
    works: list[QueuedWork] = []

    def all_reduce(tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> QueuedWork:
        device.collective(seconds[len(works)])
        works.append(QueuedWork())
        return works[-1]

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return works


def test_nccl_collective_seconds_are_the_devices(monkeypatch, device: FakeDevice) -> None:
    works = launcher(monkeypatch, device, 0.25)
    ledger = WireLedger()
    tensor = torch.ones(4)
    fut = Collectives(ledger).all_reduce(tensor)
    device.complete(works[0].future, [tensor])
    fut.wait()
    figures = ledger.report(steps=1)["collectives"]["all_reduce@world"]
    assert figures["seconds"] == pytest.approx(0.25)
    assert figures["payload_bytes"] == 16


def test_nccl_overlap_splits_device_time_at_the_end_of_backward(monkeypatch, device) -> None:
    works = launcher(monkeypatch, device, 0.8, 0.5)
    comm = Collectives(WireLedger())
    meter = OverlapMeter(comm.clock)
    device.compute(1.0)  # first bucket's gradients ready at 1.0 s; its all-reduce 1.0-1.8
    first = meter.track(comm.all_reduce(torch.ones(2)), is_last=False)
    device.complete(works[0].future, [torch.ones(2)])
    device.compute(1.0)  # backward ends at 2.0 s with the last bucket; its all-reduce 2.0-2.5
    last = meter.track(comm.all_reduce(torch.ones(2)), is_last=True)
    device.complete(works[1].future, [torch.ones(2)])
    first.wait(), last.wait()
    report = meter.report()
    assert (report["hidden_s"], report["exposed_s"]) == (pytest.approx(0.8), pytest.approx(0.5))
    assert report["backward_passes"] == 1


@pytest.mark.parametrize(
    ("backend", "device_timed"),
    [("gloo", False), ("nccl", True), ("cpu:gloo,cuda:nccl", True)],
)
def test_each_backend_gets_its_clock(backend: str, device_timed: bool) -> None:
    from xirang.comm.clock import DeviceClock, clock_for

    assert isinstance(clock_for(backend), DeviceClock) == device_timed
