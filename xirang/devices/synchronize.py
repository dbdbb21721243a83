"""Waiting for a device's queued work: a timed step or measurement ends when the device is done,
not when the host has queued it (accelerators run asynchronously; the CPU does not)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import torch

#: a torch device, or its name ("cuda:0")
DeviceLike = Union["torch.device", str]


def synchronizer(*devices: DeviceLike) -> Callable[[], None]:
    """Waits for the queued work of every one of ``devices`` (a no-op for the CPU)."""
    import torch

    waits = []
    for device in map(torch.device, devices):
        module = getattr(torch, device.type, None)
        sync = getattr(module, "synchronize", None) if device.type != "cpu" else None
        if callable(sync):
            waits.append(lambda sync=sync, device=device: sync(device))

    def wait_all() -> None:
        for wait in waits:
            wait()

    return wait_all
