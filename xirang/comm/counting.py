"""Bytes on the wire, counted at the collectives a hook issues rather than estimated from the
model's size: every collective goes through :class:`Collectives`, which records the tensor bytes
it handed to torch and how long the operation took from launch to completion.

Two figures are kept per (collective, level). ``payload_bytes`` is the exact size of the tensors
issued. ``wire_bytes`` is what this rank sends for that payload under the ring algorithm that
gloo and NCCL use for large messages (an all-reduce of n bytes over p ranks sends 2(p-1)/p * n);
it is derived from the counted payload, never from parameter counts.

Times come from the group's clock (:mod:`xirang.comm.clock`): device events on NCCL, RCCL
and HCCL, whose futures complete at enqueue; the host clock on gloo.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from xirang.comm.clock import Clock, group_clock

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


#: timed spans kept unread before the ready ones are turned into seconds
SETTLE_EVERY = 256


class WireLedger:
    """The running account of one rank's collectives; safe to update from comm threads."""

    def __init__(self) -> None:
        self.tallies: dict[tuple[str, str], OpTally] = {}
        self._lock = threading.Lock()
        self._spans: list[tuple[tuple[str, str], Clock, Any, Any]] = []

    def record(self, op: str, level: str, payload: int, group_size: int) -> None:
        wire = payload * RING_SEND_FACTOR[op](group_size) if group_size > 1 else 0.0
        with self._lock:
            tally = self.tallies.setdefault((op, level), OpTally())
            tally.calls += 1
            tally.payload_bytes += payload
            tally.wire_bytes += wire

    def add_span(self, op: str, level: str, clock: Clock, start: Any, end: Any) -> None:
        """A collective's time as two stamps of ``clock``, read when they have happened (a
        device event is read without waiting once it is ready, or when a report needs it)."""
        with self._lock:
            self._spans.append(((op, level), clock, start, end))
            if len(self._spans) >= SETTLE_EVERY:
                self._settle(wait=False)

    def _settle(self, wait: bool) -> None:
        """Turn kept spans into seconds: all of them (``wait``) or those already ready."""
        kept = []
        for key, clock, start, end in self._spans:
            if wait or clock.ready(end):
                self.tallies.setdefault(key, OpTally()).seconds += clock.seconds(start, end)
            else:
                kept.append((key, clock, start, end))
        self._spans = kept

    def wire_bytes(self) -> float:
        with self._lock:
            return sum(t.wire_bytes for t in self.tallies.values())

    def payload_bytes(self) -> int:
        with self._lock:
            return sum(t.payload_bytes for t in self.tallies.values())

    def bottleneck(self) -> str | None:
        """The collective and level that spent the most time, as ``op@level``."""
        with self._lock:
            self._settle(wait=True)
            busy = [(t.seconds, key) for key, t in self.tallies.items() if t.calls]
        if not busy:
            return None
        _, (op, level) = max(busy)
        return f"{op}@{level}"

    def report(self, steps: int) -> dict[str, Any]:
        """Totals and per-step figures for a run summary."""
        steps = max(steps, 1)
        with self._lock:
            self._settle(wait=True)
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
        self.clock = group_clock(group)

    def all_reduce(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Sum ``tensor`` in place over the group."""
        started = self.clock.stamp()
        work = dist.all_reduce(tensor, group=self.group, async_op=True)
        size = tensor.numel() * tensor.element_size()
        return self._counted("all_reduce", size, work, tensor, started)

    def all_gather(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Every rank's ``tensor`` stacked along a new first dimension, in rank order."""
        out = tensor.new_empty(self.size * tensor.numel())
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        started = self.clock.stamp()
        work = gather(out, tensor.contiguous().reshape(-1), group=self.group, async_op=True)
        stacked = out.view(self.size, *tensor.shape)
        size = tensor.numel() * tensor.element_size()
        return self._counted("all_gather", size, work, stacked, started)

    def reduce_scatter(self, tensor: torch.Tensor) -> torch.futures.Future:
        """This rank's 1/p share of the sum of ``tensor`` (its length must divide by p)."""
        out = tensor.new_empty(tensor.numel() // self.size)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        started = self.clock.stamp()
        work = scatter(out, tensor.reshape(-1), group=self.group, async_op=True)
        size = tensor.numel() * tensor.element_size()
        return self._counted("reduce_scatter", size, work, out, started)

    def reduce(self, tensor: torch.Tensor, dst: int) -> torch.futures.Future:
        """Sum ``tensor`` onto global rank ``dst``."""
        started = self.clock.stamp()
        work = dist.reduce(tensor, dst=dst, group=self.group, async_op=True)
        size = tensor.numel() * tensor.element_size()
        return self._counted("reduce", size, work, tensor, started)

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.futures.Future:
        """Global rank ``src``'s ``tensor`` copied to every rank of the group."""
        started = self.clock.stamp()
        work = dist.broadcast(tensor, src=src, group=self.group, async_op=True)
        size = tensor.numel() * tensor.element_size()
        return self._counted("broadcast", size, work, tensor, started)

    def _counted(
        self, op: str, payload: int, work: Any, result: Any, started: Any
    ) -> torch.futures.Future:
        """Count ``work`` and time it from ``started`` (stamped before the launch) to the end
        stamp its future's callback takes: on a device stream that callback's current stream
        waits for the collective, so the end event is stamped when the transfer has ended."""
        self.ledger.record(op, self.level, payload, self.size)

        def done(fut: torch.futures.Future) -> Any:
            fut.value()  # re-raises a failed collective
            self.ledger.add_span(op, self.level, self.clock, started, self.clock.stamp())
            return result

        try:
            fut = work.get_future()
        except RuntimeError:  # gloo's reduce-scatter offers no future: complete it here
            work.wait()
            fut = torch.futures.Future()
            fut.set_result(result)
        return fut.then(done)


class CountedGroup:
    """The process group handed to torch's own DDP comm hooks and model averagers, so that
    every all-reduce they issue is counted in xirang's ledger.

    torch's hooks (``fp16_compress_hook``, ``powerSGD_hook``, ``post_localSGD_hook``, the
    ``model_averaging`` utilities) reach the network only through
    ``dist.all_reduce(tensor, group=g)``, which asks ``g`` for ``size()`` and calls
    ``g.allreduce([tensor], opts)``. This object answers both, sending the all-reduce through
    :meth:`Collectives.all_reduce` on the real group: the bytes are those of the tensors the
    hook issued, and their time is the collective's, as for xirang's own hooks.
    """

    def __init__(self, collectives: Collectives) -> None:
        self.collectives = collectives

    def size(self) -> int:
        return self.collectives.size

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> CountedWork:
        """Sum ``tensors[0]`` in place over the group (the only reduction torch's hooks use)."""
        if len(tensors) != 1 or opts.reduceOp != dist.ReduceOp.SUM:
            raise ValueError("a counted group carries single-tensor SUM all-reduces only")
        return CountedWork(self.collectives.all_reduce(tensors[0]).then(lambda f: [f.value()]))


class CountedWork:
    """What ``dist.all_reduce(..., async_op=True)`` returns for a :class:`CountedGroup`."""

    def __init__(self, fut: torch.futures.Future) -> None:
        self.fut = fut

    def get_future(self) -> torch.futures.Future:
        return self.fut

    def wait(self) -> bool:
        self.fut.wait()
        return True
