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
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import _get_fqns, get_state_dict, set_state_dict
from torch.utils._pytree import tree_map_only

#: the key of the optimizer's state in what a checkpoint saves (``{"model": .., "optim": ..}``)
OPTIM_KEY = "optim"


@runtime_checkable
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

    def prepare_load(self, model: torch.nn.Module, optimizer: Any, metadata: Metadata) -> bool:
        """Give a fresh optimizer empty state tensors shaped as the checkpoint stores them.

        Without state, ``get_state_dict`` makes some by running one optimizer step on zero
        gradients: an extra allocation of every gradient, zero-filled moments and a full step of
        arithmetic, all overwritten by the load that follows. Done only when every parameter is
        a whole local tensor with tensor-only state in the checkpoint (single, DDP); sharded
        parameters keep the step. Returns whether it seeded."""
        if optimizer is None or optimizer.state:
            return False
        stored = metadata.state_dict_metadata
        names = {id(p): n for n, p in model.named_parameters()}
        state: dict[int, dict[str, torch.Tensor]] = {}
        index = 0
        for group in optimizer.param_groups:
            for param in group["params"]:
                seeded = _seed(param, _fqns(model, names.get(id(param))), stored)
                if seeded is None:
                    return False
                if seeded:
                    state[index] = seeded
                index += 1
        if not state:
            return False
        groups = optimizer.state_dict()["param_groups"]
        optimizer.load_state_dict({"state": state, "param_groups": groups})
        return True


def _fqns(model: torch.nn.Module, name: str | None) -> set[str]:
    return _get_fqns(model, name) if name is not None else set()


def _seed(param: Any, fqns: set[str], stored: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    """Empty state tensors for one parameter from the checkpoint's metadata; {} when it has no
    state there; None when it cannot be seeded (sharded, or state that is not a tensor)."""
    if type(param) not in (torch.Tensor, torch.nn.Parameter) or len(fqns) != 1:
        return None
    prefix = f"{OPTIM_KEY}.state.{next(iter(fqns))}."
    entries = {k[len(prefix) :]: md for k, md in stored.items() if k.startswith(prefix)}
    seeded = {}
    for key, md in entries.items():
        if "." in key or not isinstance(md, TensorStorageMetadata):
            return None
        if key != "step" and tuple(md.size) != tuple(param.shape):
            return None
        device = "cpu" if key == "step" else param.device  # load_state_dict moves it if due
        seeded[key] = torch.empty(tuple(md.size), dtype=md.properties.dtype, device=device)
    return seeded


def adapter_for(strategy: Any) -> StateAdapter:
    """The strategy itself when it knows how to give its state, the torch default otherwise."""
    return strategy if isinstance(strategy, StateAdapter) else TorchStateAdapter()


class StagingBuffers:
    """Private CPU copies of state tensors, reused from one save to the next.

    After :meth:`copy` returns, training may change the originals while the copies are written
    in the background. Reusing the buffers turns every save after the first into a plain memory
    copy, without allocating (and page-faulting) the whole state again; the manager waits for
    the previous save before copying, so a buffer is never overwritten while it is written.

    Accelerator tensors go into pinned buffers through ``non_blocking`` copies on a side stream
    (which first waits for the work queued on the compute stream, so it copies the current
    values); one event after the last copy is waited on. The stall is the copies at the link's
    speed: no copy through pageable memory, no whole-device synchronisation."""

    def __init__(self) -> None:
        self.buffers: dict[int, torch.Tensor] = {}
        self.streams: dict[torch.device, Any] = {}

    def copy(self, tree: Any) -> Any:
        counter = iter(range(1 << 62))
        used: dict[torch.device, Any] = {}  # side streams this copy issued work on
        staged = tree_map_only(torch.Tensor, lambda t: self._stage(next(counter), t, used), tree)
        for device, stream in used.items():
            copied = _copy_module(device).Event()
            copied.record(stream)
            copied.synchronize()
        return staged

    def _stage(self, index: int, tensor: torch.Tensor, used: dict[torch.device, Any]) -> Any:
        source = tensor.detach()
        plain = type(source) is torch.Tensor  # DTensor and friends: a fresh copy each time
        buffer = self.buffers.get(index) if plain else None
        if buffer is not None and (buffer.shape, buffer.dtype) != (source.shape, source.dtype):
            buffer = None
        module = _copy_module(source.device) if plain else None
        if module is None:
            if buffer is None:
                buffer = self.buffers[index] = source.to("cpu", copy=True)
                return buffer
            return buffer.copy_(source)
        if buffer is None:
            buffer = self.buffers[index] = pinned_empty(source.shape, source.dtype)
        with module.stream(self._side_stream(source.device, module, used)):
            buffer.copy_(source, non_blocking=True)
        return buffer

    def _side_stream(self, device: torch.device, module: Any, used: dict[torch.device, Any]) -> Any:
        """The device's copy stream, made to wait for the compute queued so far (once a copy)."""
        stream = self.streams.get(device)
        if stream is None:
            stream = self.streams[device] = module.Stream(device=device)
        if device not in used:
            stream.wait_stream(module.current_stream(device))
            used[device] = stream
        return stream


def pinned_empty(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """Page-locked host memory: the driver copies into it directly, without a bounce buffer."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def _copy_module(device: torch.device) -> Any:
    """torch.cuda / torch.npu / ... for a device with streams to copy on; None for the CPU."""
    if device.type in ("cpu", "meta"):
        return None
    module = getattr(torch, device.type, None)
    return module if hasattr(module, "Stream") else None


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
