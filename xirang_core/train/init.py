"""Parameter initialisation that does not depend on how the model is split.

Each parameter is drawn from a generator seeded by the run's seed and the parameter's own name,
so a model gets the same initial weights whether it is built whole on one worker, cut into
pipeline stages, or created on the meta device and materialised already sharded: the strategy
equivalence tests rely on it, and a resumed or resharded run never depends on build order.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

import torch
from torch import nn

from xirang_core.specs import Model, ModelBase, with_defaults

#: name segments that wrappers (activation checkpointing, torch.compile, FSDP1) insert into
#: parameter names; the family's ``param_init`` and the generators see the model's own names
WRAPPER_SEGMENTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def parameter_generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator for parameter ``name`` under run seed ``seed``."""
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def model_name(name: str) -> str:
    """``name`` as the unwrapped model calls the parameter."""
    for segment in WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    return name


def full_parameter(
    model: nn.Module, name: str, param: torch.Tensor, seed: int | None = None
) -> torch.Tensor:
    """The whole (unsharded) initial value of parameter ``name``, drawn on the CPU."""
    seed = torch.initial_seed() if seed is None else seed
    full = torch.empty(param.shape, dtype=param.dtype, device="cpu")
    cast(Model, model).param_init(name, full, parameter_generator(seed, name))
    return full


def _parameters(model: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """Each parameter once (a tied one under its first name), named as the model names it."""
    for name, param in model.named_parameters():
        yield model_name(name), param


#: most parameters drawn at once, each on a thread of its own: one generator draws serially
#: (the CPU's Mersenne Twister), so threads are what runs the draws in parallel; each holds
#: one whole parameter meanwhile
INIT_THREADS = 8


def drawn(
    model: nn.Module,
    named: list[tuple[str, nn.Parameter]],
    seed: int | None,
    device: torch.device | None = None,
) -> Iterator[tuple[nn.Parameter, torch.Tensor]]:
    """``(parameter, its initial value)`` for each of ``named``, in order, drawn up to
    :data:`INIT_THREADS` (at most torch's thread count) at a time: the whole value, or the
    part of it this rank stores for a DTensor parameter, cut on the CPU (:func:`_local_part`).
    Each parameter has its own generator, so values do not depend on which thread draws them
    or when. With ``device`` (an accelerator) each thread makes it current first, so no thread
    opens a context on another device."""
    seed = torch.initial_seed() if seed is None else seed
    family = cast(Model, with_defaults(model, ModelBase))
    threads = INIT_THREADS if family.param_init_threadsafe else 1
    workers = max(1, min(threads, torch.get_num_threads()))

    def draw(name: str, param: nn.Parameter) -> torch.Tensor:
        if device is not None and device.type not in ("cpu", "meta"):
            torch.accelerator.set_device_index(device)
        return _local_part(full_parameter(model, name, param, seed), param)

    with ThreadPoolExecutor(workers, thread_name_prefix="xirang-init") as pool:
        window: deque[tuple[nn.Parameter, Future[torch.Tensor]]] = deque()
        for name, param in named:
            window.append((param, pool.submit(draw, name, param)))
            if len(window) >= workers:
                done, future = window.popleft()
                yield done, future.result()
        while window:
            done, future = window.popleft()
            yield done, future.result()


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int | None = None) -> None:
    """Initialise every parameter of a materialised, unsplit ``model`` in place through its
    family's ``param_init(name, tensor, generator)``; ``seed`` defaults to torch's initial seed
    (the worker seeds torch with ``config.seed`` before building the model). Parameters on the
    meta device are left alone: :func:`materialize` draws them once they have storage."""
    materialised = [(n, p) for n, p in _parameters(model) if not p.is_meta]
    for param, value in drawn(model, materialised, seed):
        param.copy_(value)


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device | str, seed: int | None = None) -> nn.Module:
    """Give a model built on the meta device (and possibly split and sharded by a strategy
    since) storage on ``device``, then fill each parameter's local part with the matching part
    of the value :func:`init_parameters` would give it.

    A few parameters' whole values exist at a time (:data:`INIT_THREADS`, drawn on the CPU
    and cut there): a worker's peak is its own shards plus that many of the largest
    parameters, never the whole model, and only its own part of each reaches ``device``.
    Drawing only the shard is not possible without changing the weights: the CPU generator's
    stream has no skip-ahead, so rank r's values come after every value before them, and a
    device's generator (Philox) draws a different stream. A DTensor parameter (FSDP2's
    ``Shard(0)``, padded when uneven; tensor parallel's shards; both at once) receives the
    slice its placements give this rank, so the weights equal the single-process ones bit for
    bit at any world size. Buffers come from the family's optional ``init_buffers()``.
    """
    ties = _ties(model)
    model.to_empty(device=device)
    for holder, attr, owner, owner_attr in ties:  # plain tensors come back one per holder
        setattr(holder, attr, getattr(owner, owner_attr))
    device = torch.device(device)
    for param, local in drawn(model, list(_parameters(model)), seed, device):
        _local(param).copy_(local)
    cast(Model, model).init_buffers()  # a family's optional buffers (RoPE tables)
    return model


def _ties(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module, str]]:
    """``(holder, attribute, owner, owner's attribute)`` for every module that holds a
    parameter some earlier module (its owner) holds too: tied weights."""
    owners: dict[int, tuple[nn.Module, str]] = {}
    ties = []
    for holder in model.modules():
        for attr, param in holder._parameters.items():
            if param is None:
                continue
            if id(param) in owners:
                ties.append((holder, attr, *owners[id(param)]))
            else:
                owners[id(param)] = (holder, attr)
    return ties


def _local(param: torch.Tensor) -> torch.Tensor:
    """The part of ``param`` this rank stores (all of it unless it is a DTensor)."""
    return param.to_local() if hasattr(param, "to_local") else param


def _local_part(full: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """The slice of ``full`` that ``param``'s placements give this rank: the split
    ``distribute_tensor(..., src_data_rank=None)`` makes, done on the CPU, where ``full`` is
    (``distribute_tensor`` first copies the whole tensor to the mesh's device). Every rank
    drew the same ``full``; a replicated dimension keeps it whole."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    if not isinstance(param, DTensor):
        return full

    mesh, local = param.device_mesh, full
    for index, placement in enumerate(param.placements):
        dim = getattr(placement, "dim", 0) % max(1, full.ndim)
        if isinstance(placement, _StridedShard):  # FSDP2 over tensor parallel's shards
            local = _StridedShard._make_shard_tensor(
                dim, local, mesh, index, None, split_factor=placement.split_factor
            )
        elif isinstance(placement, Shard):
            local = Shard._make_shard_tensor(dim, local, mesh, index, None)
        elif not isinstance(placement, Replicate):
            raise ValueError(f"a parameter placed {placement} has no initial value to draw")
    return local
