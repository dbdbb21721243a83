"""Bytes on the wire, counted at the collectives a hook issues rather than estimated from the
model's size: every collective goes through :class:`Collectives`, which records the tensor bytes
it handed to torch and how long the operation took from launch to completion.

Two figures are kept per (collective, level). ``payload_bytes`` is the exact size of the tensors
issued. ``wire_bytes`` is what this rank sends for that payload under the ring algorithm that
gloo and NCCL use for large messages (an all-reduce of n bytes over p ranks sends 2(p-1)/p * n);
it is derived from the counted payload, never from parameter counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

#: bytes a rank sends per byte of its input, for the ring algorithms, as a function of p
RING_SEND_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_gather": lambda p: float(p - 1),
    "reduce": lambda p: (p - 1) / p,
    "broadcast": lambda p: (p - 1) / p,
}


@dataclass
class OpTally:
    """What one kind of collective at one level carried and cost so far."""

    calls: int = 0
    payload_bytes: int = 0
    wire_bytes: float = 0.0
    seconds: float = 0.0


class WireLedger:
    """The running account of one rank's collectives; safe to update from comm threads."""

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str], OpTally] = {}
        self._lock = threading.Lock()

    def record(self, op: str, level: str, payload: int, group_size: int) -> None:
        wire = payload * RING_SEND_FACTOR[op](group_size) if group_size > 1 else 0.0
        with self._lock:
            tally = self.tallies.setdefault((op, level), OpTally())
            tally.calls += 1
            tally.payload_bytes += payload
            tally.wire_bytes += wire

    def add_time(self, op: str, level: str, seconds: float) -> None:
        with self._lock:
            self.tallies.setdefault((op, level), OpTally()).seconds += seconds

    def wire_bytes(self) -> float:
        with self._lock:
            return sum(t.wire_bytes for t in self.tallies.values())

    def payload_bytes(self) -> int:
        with self._lock:
            return sum(t.payload_bytes for t in self.tallies.values())

    def bottleneck(self) -> str | None:
        """The collective and level that spent the most time, as ``op@level``."""
        with self._lock:
            busy = [(t.seconds, key) for key, t in self.tallies.items() if t.calls]
        if not busy:
            return None
        _, (op, level) = max(busy)
        return f"{op}@{level}"

    def report(self, steps: int) -> dict[str, Any]:
        """Totals and per-step figures for a run summary."""
        steps = max(steps, 1)
        with self._lock:
            by_op = {
                f"{op}@{level}": {
                    "calls": t.calls,
                    "payload_bytes": t.payload_bytes,
                    "wire_bytes": round(t.wire_bytes),
                    "seconds": round(t.seconds, 4),
                }
                for (op, level), t in sorted(self.tallies.items())
            }
        return {
            "payload_bytes": self.payload_bytes(),
            "wire_bytes": round(self.wire_bytes()),
            "wire_bytes_per_step": round(self.wire_bytes() / steps),
            "bottleneck": self.bottleneck(),
            "collectives": by_op,
        }


class Collectives:
    """The collectives a hook may issue, each asynchronous and counted in ``ledger``.

    Each method returns a :class:`torch.futures.Future` that resolves once the operation has
    completed, to the tensor (or tensors) holding the result.
    """

    def __init__(self, ledger: WireLedger, group: Any = None, level: str = "world") -> None:
        self.ledger, self.group, self.level = ledger, group, level
        self.size = dist.get_world_size(group) if dist.is_initialized() else 1

    def all_reduce(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Sum ``tensor`` in place over the group."""
        work = dist.all_reduce(tensor, group=self.group, async_op=True)
        return self._counted("all_reduce", tensor.numel() * tensor.element_size(), work, tensor)

    def all_gather(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Every rank's ``tensor`` stacked along a new first dimension, in rank order."""
        out = tensor.new_empty(self.size * tensor.numel())
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = gather(out, tensor.contiguous().reshape(-1), group=self.group, async_op=True)
        stacked = out.view(self.size, *tensor.shape)
        return self._counted("all_gather", tensor.numel() * tensor.element_size(), work, stacked)

    def reduce_scatter(self, tensor: torch.Tensor) -> torch.futures.Future:
        """This rank's 1/p share of the sum of ``tensor`` (its length must divide by p)."""
        out = tensor.new_empty(tensor.numel() // self.size)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        work = scatter(out, tensor.reshape(-1), group=self.group, async_op=True)
        return self._counted("reduce_scatter", tensor.numel() * tensor.element_size(), work, out)

    def reduce(self, tensor: torch.Tensor, dst: int) -> torch.futures.Future:
        """Sum ``tensor`` onto global rank ``dst``."""
        work = dist.reduce(tensor, dst=dst, group=self.group, async_op=True)
        return self._counted("reduce", tensor.numel() * tensor.element_size(), work, tensor)

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.futures.Future:
        """Global rank ``src``'s ``tensor`` copied to every rank of the group."""
        work = dist.broadcast(tensor, src=src, group=self.group, async_op=True)
        return self._counted("broadcast", tensor.numel() * tensor.element_size(), work, tensor)

    def _counted(self, op: str, payload: int, work: Any, result: Any) -> torch.futures.Future:
        self.ledger.record(op, self.level, payload, self.size)
        started = time.perf_counter()

        def done(fut: torch.futures.Future) -> Any:
            fut.value()  # re-raises a failed collective
            self.ledger.add_time(op, self.level, time.perf_counter() - started)
            return result

        try:
            fut = work.get_future()
        except RuntimeError:  # gloo's reduce-scatter offers no future: complete it here
            work.wait()
            fut = torch.futures.Future()
            fut.set_result(result)
        return fut.then(done)
