"""Async checkpoint staging of accelerator tensors: pinned host buffers, reused from save to
save, filled by non_blocking copies on a side stream that first waits for the compute stream;
``copy`` returns once one event after the copies has completed (the stall is the copy).

Hand-written fake (there is no GPU here): ``_copy_module`` answers a fake ``torch.cuda`` for
these CPU tensors, whose streams and events record what they were asked; ``pinned_empty`` is
replaced by a recorder (pinning needs a driver). The copies themselves are real."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xirang_core.checkpoint import state
from xirang_core.checkpoint.state import StagingBuffers

LOG: list[tuple[Any, ...]] = []


class FakeStream:
    def __init__(self, device: Any = None, name: str = "side") -> None:
        self.name = name

    def wait_stream(self, other: FakeStream) -> None:
        LOG.append(("wait_stream", self.name, other.name))


class FakeEvent:
    def record(self, stream: FakeStream) -> None:
        LOG.append(("record", stream.name))

    def synchronize(self) -> None:
        LOG.append(("synchronize",))


class FakeCuda:
    Stream, Event = FakeStream, FakeEvent
    inside: str | None = None

    @staticmethod
    def current_stream(device: Any = None) -> FakeStream:
        return FakeStream(name="compute")

    class stream:
        def __init__(self, stream: FakeStream) -> None:
            self.s = stream

        def __enter__(self) -> None:
            FakeCuda.inside = self.s.name

        def __exit__(self, *exc: Any) -> None:
            FakeCuda.inside = None


@pytest.fixture
def fake_device(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    LOG.clear()
    pinned: list[torch.Tensor] = []

    def pinned_empty(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        pinned.append(torch.empty(shape, dtype=dtype))
        return pinned[-1]

    real_copy = torch.Tensor.copy_

    def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        LOG.append(("copy", FakeCuda.inside, non_blocking))
        return real_copy(dst, src, non_blocking)

    monkeypatch.setattr(state, "_copy_module", lambda device: FakeCuda)
    monkeypatch.setattr(state, "pinned_empty", pinned_empty)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    return pinned


def test_device_state_is_staged_into_reused_pinned_buffers(fake_device) -> None:
    weights = {"model": {"w": torch.arange(6.0).view(2, 3)}, "optim": {"m": torch.ones(4)}}
    staging = StagingBuffers()
    first = staging.copy(weights)
    assert torch.equal(first["model"]["w"], weights["model"]["w"])
    assert [t.data_ptr() for t in fake_device] == [
        first["model"]["w"].data_ptr(),
        first["optim"]["m"].data_ptr(),
    ]
    copies = [entry for entry in LOG if entry[0] == "copy"]
    assert copies == [("copy", "side", True)] * 2  # on the side stream, non_blocking
    assert LOG[0] == ("wait_stream", "side", "compute")  # sees the compute queued before
    assert LOG[-2:] == [("record", "side"), ("synchronize",)]  # waited on one event

    weights["model"]["w"].add_(1)
    LOG.clear()
    second = staging.copy(weights)
    assert len(fake_device) == 2  # no new pinned allocation
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr()
    assert torch.equal(second["model"]["w"], weights["model"]["w"])
    assert LOG.count(("wait_stream", "side", "compute")) == 1


def test_cpu_state_is_copied_as_before() -> None:
    weights = {"w": torch.arange(3.0)}
    staging = StagingBuffers()
    copied = staging.copy(weights)
    weights["w"].add_(1)
    assert torch.equal(copied["w"], torch.arange(3.0))  # a private copy
    again = staging.copy(weights)
    assert again["w"].data_ptr() == copied["w"].data_ptr() and torch.equal(again["w"], weights["w"])
