"""Exact memory accounting on a CPU worker, where no allocator reports a device peak.

Model states are read from the tensors themselves (this worker's shards only); activations are
the tensors autograd saves for backward, seen through saved-tensor hooks and counted once per
storage while they are alive, so the peak is the most that was held at one time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


def local_bytes(t: torch.Tensor) -> int:
    """Bytes this worker stores for ``t`` (its shard, for a DTensor)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Parameters, gradients and optimizer state held by this worker, in bytes."""
    params = list({id(p): p for p in model.parameters()}.values())
    optim = sum(
        local_bytes(v)
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    return {
        "params": sum(local_bytes(p) for p in params),
        "grads": sum(local_bytes(p) for p in params if p.requires_grad),
        "optimizer": optim,
    }


@dataclass
class SavedTensorMeter:
    """Live and peak bytes of tensors saved for backward, one count per storage."""

    model: nn.Module
    live: int = 0
    peak: int = 0
    #: most bytes of parameters gathered whole at once (FSDP unsharding them for compute),
    #: with the gradients they hold between micro-batches
    gathered: int = 0
    _refs: dict[int, list[int]] = field(default_factory=dict)
    _sharded: set[int] = field(default_factory=set)

    @contextlib.contextmanager
    def watch(self) -> Iterator[SavedTensorMeter]:
        """Count inside; parameters present at entry are the stored (sharded) ones."""
        self._sharded = {_storage(p) for p in self.model.parameters()}
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield self

    def _pack(self, t: torch.Tensor) -> Any:
        key = _storage(t)
        current = {_storage(p): p for p in self.model.parameters()}
        whole = [p for k, p in current.items() if k not in self._sharded]
        # gathered parameters, and the whole-size gradients they accumulate (ZeRO-1)
        gathered = sum(local_bytes(p) for p in whole)
        gathered += sum(local_bytes(p.grad) for p in whole if p.grad is not None)
        self.gathered = max(self.gathered, gathered)
        if key in current:
            return t  # a weight saved by reference is model state, not activation
        entry = self._refs.setdefault(key, [0, _storage_bytes(t)])
        if entry[0] == 0:
            self.live += entry[1]
            self.peak = max(self.peak, self.live)
        entry[0] += 1
        return _Held(t, key, self)

    @staticmethod
    def _unpack(held: Any) -> torch.Tensor:
        return held.tensor if isinstance(held, _Held) else held

    def release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]


class _Held:
    """A saved tensor; when autograd frees it (after backward) the meter counts it released."""

    __slots__ = ("key", "meter", "tensor")

    def __init__(self, tensor: torch.Tensor, key: int, meter: SavedTensorMeter) -> None:
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self) -> None:
        self.meter.release(self.key)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding ``t``'s storage: a DTensor's local shard, or the result inside a
    collective's not yet awaited output (a vocabulary-parallel embedding's all-reduce)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    if isinstance(t, AsyncCollectiveTensor):
        return t.elem
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def _storage(t: torch.Tensor) -> int:
    return _local(t).untyped_storage().data_ptr()


def _storage_bytes(t: torch.Tensor) -> int:
    return _local(t).untyped_storage().nbytes()
