"""Which clock times a collective: the host's for gloo, the device's own events for NCCL, RCCL
and HCCL.

On an accelerator backend a collective's work object and its future complete when the operation
has been *queued* on the communication stream, not when it has run: a host clock read at
completion measures the launch, a few microseconds, whatever the transfer cost. Device events
recorded on the current stream (which, inside a CUDA future's callback, waits for the
communication stream) are stamped when the device reaches them, so the time between two of them
is the device's. Reading an event's time waits for it, so stamps are kept and turned into
seconds later (:meth:`Clock.seconds`), once they are :meth:`ready` or when a report needs them.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

#: the torch module whose events time a backend's collectives (ROCm's RCCL answers to "nccl")
EVENT_MODULE: dict[str, str] = {"nccl": "cuda", "hccl": "npu"}


class Clock(Protocol):
    """Stamps taken now; seconds between two stamps once the later one has happened."""

    def stamp(self) -> Any: ...

    def ready(self, stamp: Any) -> bool: ...

    def seconds(self, start: Any, end: Any) -> float: ...


class HostClock:
    """``time.perf_counter``: right for gloo, whose futures complete when the work is done."""

    def stamp(self) -> float:
        return time.perf_counter()

    def ready(self, stamp: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start


class DeviceClock:
    """Timing events of ``module`` (``torch.cuda`` or ``torch.npu``) on the current stream."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def stamp(self) -> Any:
        event = self.module.Event(enable_timing=True)
        event.record()
        return event

    def ready(self, stamp: Any) -> bool:
        return bool(stamp.query())

    def seconds(self, start: Any, end: Any) -> float:
        end.synchronize()
        return start.elapsed_time(end) / 1000.0  # events count milliseconds


def clock_for(backend: str) -> Clock:
    """The clock that times ``backend``'s collectives; a per-device backend string
    (``cpu:gloo,cuda:nccl``) is timed by its accelerator's events."""
    names = [part.rpartition(":")[2] for part in backend.split(",")]
    name = next((EVENT_MODULE[n] for n in names if n in EVENT_MODULE), None)
    if name is None:
        return HostClock()
    import torch

    return DeviceClock(getattr(torch, name))


def group_clock(group: Any = None) -> Clock:
    """The clock for ``group``'s backend (the host's when no group is open)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return HostClock()
    return clock_for(str(dist.get_backend(group)))
