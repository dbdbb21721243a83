"""Host-to-device batches one ahead: read, pinned and copied while the device computes.

Without this, each micro-batch is read from the corpus on the main thread and copied from
pageable memory, which the driver stages through a bounce buffer and does synchronously: the
device idles for the read and the copy of every batch. Here a worker thread reads the *next*
batch (the loop's order is fixed: micro-batches 0..accum-1 of a step, then the next step), pins
it (torch's caching host allocator reuses the pinned blocks) and issues a ``non_blocking`` copy
on a side stream; the loop's stream waits only for that copy's event. Batches are a pure
function of (step, micro), so a batch asked for out of order (a resume, a pipeline's own order)
is simply read then and the look-ahead restarts from it. On the CPU nothing changes.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch

#: inputs and targets, then whatever else the model takes (with data.document_mask, documents)
Batch = tuple[torch.Tensor, ...]


class Batches(Protocol):
    def get(self, step: int, micro: int = 0) -> Batch: ...


class StepBatches(Batches, Protocol):
    """What the trainer reads: a rank's micro-batches per step, and each one's share of the
    step's trained targets (1.0 where every target trains; less for fine-tuning's replies)."""

    def loss_weight(self, step: int, micro: int) -> float: ...


def prefetched(batches: Batches, device: torch.device, accum: int) -> Batches:
    """``batches`` read one ahead onto ``device``; unchanged on devices without streams (CPU)."""
    device = torch.device(device)
    module = getattr(torch, device.type, None) if device.type != "cpu" else None
    if module is None or not hasattr(module, "Stream"):
        return batches
    return DevicePrefetcher(batches, device, accum, module)


class DevicePrefetcher:
    """``get(step, micro)`` as ``batches`` answers it, already on ``device``."""

    def __init__(self, batches: Batches, device: torch.device, accum: int, module: Any) -> None:
        self.batches, self.device, self.accum, self.module = batches, device, accum, module
        self.stream = module.Stream(device=device)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="xirang-prefetch")
        self._ahead: tuple[tuple[int, int], Future] | None = None

    def get(self, step: int, micro: int = 0) -> Batch:
        key = (step, micro)
        if self._ahead is not None and self._ahead[0] == key:
            pending = self._ahead[1]
        else:
            if self._ahead is not None:
                self._ahead[1].exception()  # a stale look-ahead finishes (its error unraised)
            pending = self._reader.submit(self._copy, key)
        self._ahead = (self.following(key), self._reader.submit(self._copy, self.following(key)))
        batch, copied = pending.result()
        current = self.module.current_stream(self.device)
        current.wait_event(copied)
        for tensor in batch:  # allocated on the side stream, used on this one
            tensor.record_stream(current)
        return batch

    def following(self, key: tuple[int, int]) -> tuple[int, int]:
        step, micro = key
        return (step, micro + 1) if micro + 1 < self.accum else (step + 1, 0)

    def _copy(self, key: tuple[int, int]) -> tuple[Batch, Any]:
        """Read ``key``'s batch, pin it and start its copy on the side stream (worker thread)."""
        host = self.batches.get(*key)
        with self.module.stream(self.stream):
            batch = tuple(t.pin_memory().to(self.device, non_blocking=True) for t in host)
            copied = self.module.Event()
            copied.record(self.stream)
        return batch, copied  # type: ignore[return-value]
