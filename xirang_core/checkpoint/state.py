"""What a worker contributes to a checkpoint, and how it is put back.

Model and optimizer state go through ``torch.distributed.checkpoint.state_dict``'s
``get_state_dict``/``set_state_dict``, which see through DDP and FSDP wrappers and give
fully-qualified names, so the same checkpoint loads under another strategy or world size. A
strategy that holds its state differently can provide ``get_state_dict(model, optimizer)`` and
``set_state_dict(model, optimizer, model_sd, optim_sd)`` of its own; the manager uses them.

Per rank, the RNG states of Python, NumPy and torch (CPU and the accelerator) and the data
reader's position are kept as JSON, small and readable.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.utils._pytree import tree_map_only


class StateAdapter(Protocol):
    """How model and optimizer state are taken out and put back (a strategy may supply it)."""

    def get_state_dict(self, model: torch.nn.Module, optimizer: Any) -> tuple[dict, dict]: ...

    def set_state_dict(
        self, model: torch.nn.Module, optimizer: Any, model_sd: dict, optim_sd: dict
    ) -> None: ...


class TorchStateAdapter:
    """The default: torch.distributed.checkpoint's own view of DDP, FSDP and plain modules."""

    def get_state_dict(self, model: torch.nn.Module, optimizer: Any) -> tuple[dict, dict]:
        return get_state_dict(model, optimizer)

    def set_state_dict(
        self, model: torch.nn.Module, optimizer: Any, model_sd: dict, optim_sd: dict
    ) -> None:
        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)


def adapter_for(strategy: Any) -> StateAdapter:
    """The strategy itself when it knows how to give its state, the torch default otherwise."""
    if hasattr(strategy, "get_state_dict") and hasattr(strategy, "set_state_dict"):
        return strategy
    return TorchStateAdapter()


class StagingBuffers:
    """Private CPU copies of state tensors, reused from one save to the next.

    After :meth:`copy` returns, training may change the originals while the copies are written
    in the background. Reusing the buffers turns every save after the first into a plain memory
    copy, without allocating (and page-faulting) the whole state again; the manager waits for
    the previous save before copying, so a buffer is never overwritten while it is written."""

    def __init__(self) -> None:
        self.buffers: dict[int, torch.Tensor] = {}

    def copy(self, tree: Any) -> Any:
        counter = iter(range(1 << 62))
        return tree_map_only(torch.Tensor, lambda t: self._stage(next(counter), t), tree)

    def _stage(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        source = tensor.detach()
        buffer = self.buffers.get(index)
        if (
            buffer is None
            or type(source) is not torch.Tensor  # DTensor and friends: a fresh copy each time
            or buffer.shape != source.shape
            or buffer.dtype != source.dtype
        ):
            buffer = source.to("cpu", copy=True)
            self.buffers[index] = buffer
            return buffer
        return buffer.copy_(source)


def capture_rng(device: torch.device) -> dict[str, Any]:
    """The RNG states of Python, NumPy, torch's CPU generator and the device's, as JSON."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": _python_rng_to_json(random.getstate()),
        "numpy": {**np_state, "state": {k: _np_json(v) for k, v in np_state["state"].items()}},
        "torch": torch.get_rng_state().numpy().tobytes().hex(),
    }
    module = _device_module(device)
    if module is not None:
        state[device.type] = module.get_rng_state(device).cpu().numpy().tobytes().hex()
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Put back what :func:`capture_rng` took, so dropout and sampling continue as before."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    key = np.asarray(np_state["state"]["key"], dtype=np.uint32)
    np.random.set_state({**np_state, "state": {**np_state["state"], "key": key}})
    torch.set_rng_state(_bytes_tensor(state["torch"]))
    module = _device_module(device)
    if module is not None and device.type in state:
        module.set_rng_state(_bytes_tensor(state[device.type]), device)


def _device_module(device: torch.device) -> Any:
    """torch.cuda / torch.npu / ... when the device has its own generator; None for CPU."""
    if device.type in ("cpu", "meta"):
        return None
    module = getattr(torch, device.type, None)
    return module if hasattr(module, "get_rng_state") else None


def _python_rng_to_json(state: tuple) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _np_json(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray) else value


def _bytes_tensor(hex_bytes: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(bytes.fromhex(hex_bytes)), dtype=torch.uint8)
