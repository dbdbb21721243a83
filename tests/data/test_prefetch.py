"""Batches reach an accelerator pinned and one ahead: while the loop holds batch k, batch k+1 has
been read, pinned and its non-blocking copy issued on a side stream; the loop's stream waits for
that copy's event, and every batch is the one the reader gives for its (step, micro).

Hand-written fake accelerator module (there is no GPU here): streams and events that record
what was asked of them, and a pinned tensor type that records ``record_stream``; the copy to the
"device" is the CPU one, so the values are real."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import pytest
import torch

from xirang_core.data.prefetch import DevicePrefetcher, prefetched
from xirang_core.specs import WorkerContext
from xirang_core.train.loop import LoopSettings, Trainer

LOG: list[tuple[Any, ...]] = []


class Pinned(torch.Tensor):
    def record_stream(self, stream: Any) -> None:
        LOG.append(("record_stream", stream.name))


class FakeStream:
    def __init__(self, name: str = "side", device: Any = None) -> None:
        self.name = name

    def wait_event(self, event: FakeEvent) -> None:
        LOG.append(("wait", self.name, event.key))


class FakeEvent:
    key: Any = None

    def record(self, stream: FakeStream) -> None:
        self.key = FakeModule.copying
        LOG.append(("event", stream.name, self.key))


class FakeModule:
    """The parts of ``torch.cuda`` the prefetcher uses."""

    Stream, Event = FakeStream, FakeEvent
    copying: Any = None
    side_thread: ClassVar[set[str]] = set()

    @staticmethod
    def current_stream(device: Any = None) -> FakeStream:
        return FakeStream("compute")

    class stream:
        def __init__(self, stream: FakeStream) -> None:
            self.s = stream

        def __enter__(self) -> None:
            FakeModule.side_thread.add(threading.current_thread().name)

        def __exit__(self, *exc: Any) -> None:
            pass


class Reader:
    """Batches as a pure function of (step, micro), logging each read."""

    def get(self, step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        LOG.append(("read", (step, micro)))
        FakeModule.copying = (step, micro)
        x = torch.full((2, 3), step * 10 + micro)
        return x, x + 1


@pytest.fixture
def pinned_copies(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    LOG.clear()
    blocking: list[bool] = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: t.clone().as_subclass(Pinned))
    real_to = torch.Tensor.to

    def to(t: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        blocking.append(isinstance(t, Pinned) and kwargs.get("non_blocking", False))
        return real_to(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    return blocking


def test_each_batch_is_the_readers_and_the_next_is_copied_ahead(pinned_copies) -> None:
    loader = DevicePrefetcher(Reader(), torch.device("cpu"), accum=2, module=FakeModule)
    for step in (1, 2):
        for micro in (0, 1):
            x, y = loader.get(step, micro)
            assert torch.equal(x, torch.full((2, 3), step * 10 + micro))
            assert torch.equal(y, x + 1)
            # by the time the loop holds (step, micro), the next one was read and its copy issued
            loader._ahead[1].result()
            assert ("read", loader.following((step, micro))) in LOG
            assert ("wait", "compute", (step, micro)) in LOG
    assert pinned_copies and all(pinned_copies)  # every copy: pinned source, non_blocking
    assert LOG.count(("record_stream", "compute")) == 8
    assert FakeModule.side_thread  # read and copied on the prefetch thread, not the loop's
    assert all(name.startswith("xirang-prefetch") for name in FakeModule.side_thread)


def test_out_of_order_batch_is_read_then_and_still_right(pinned_copies) -> None:
    loader = DevicePrefetcher(Reader(), torch.device("cpu"), accum=1, module=FakeModule)
    loader.get(1)
    x, _ = loader.get(5)  # a resume or a pipeline's own order
    assert torch.equal(x, torch.full((2, 3), 50))
    x, _ = loader.get(6)
    assert torch.equal(x, torch.full((2, 3), 60))


def test_cpu_batches_are_left_as_they_are() -> None:
    reader = Reader()
    assert prefetched(reader, torch.device("cpu"), 2) is reader


def test_the_loop_reads_accelerator_batches_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    ctx = WorkerContext(0, 0, 1, torch.device("cuda", 0), "", {})
    settings = LoopSettings(1, 2, 2, 3, 1, 1.0, {}, 0.0, 0.0, precision="bf16")
    trainer = Trainer(torch.nn.Linear(2, 2), None, Reader(), settings, ctx, None, None)
    assert isinstance(trainer.batches, DevicePrefetcher) and trainer.batches.accum == 2
