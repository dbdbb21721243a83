"""Parameter initialisation that does not depend on how the model is split.

Each parameter is drawn from a generator seeded by the run's seed and the parameter's own name,
so a model gets the same initial weights whether it is built whole on one worker, cut into
pipeline stages, or created on the meta device and materialised already sharded: the strategy
equivalence tests rely on it, and a resumed or resharded run never depends on build order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import cast

import torch
from torch import nn

from xirang_core.specs import Model

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


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int | None = None) -> None:
    """Initialise every parameter of a materialised, unsplit ``model`` in place through its
    family's ``param_init(name, tensor, generator)``; ``seed`` defaults to torch's initial seed
    (the worker seeds torch with ``config.seed`` before building the model). Parameters on the
    meta device are left alone: :func:`materialize` draws them once they have storage."""
    for name, param in _parameters(model):
        if not param.is_meta:
            param.copy_(full_parameter(model, name, param, seed))


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device | str, seed: int | None = None) -> nn.Module:
    """Give a model built on the meta device (and possibly split and sharded by a strategy
    since) storage on ``device``, then fill each parameter's local part with the matching part
    of the value :func:`init_parameters` would give it.

    One parameter's whole value exists at a time (drawn on the CPU; a sharded one is split on
    its mesh's device): a worker's peak is its own shards plus the largest parameter, never
    the whole model. A DTensor parameter (FSDP2's
    ``Shard(0)``, padded when uneven; tensor parallel's shards; both at once) receives the
    slice its placements give this rank, so the weights equal the single-process ones bit for
    bit at any world size. Buffers come from the family's optional ``init_buffers()``.
    """
    ties = _ties(model)
    model.to_empty(device=device)
    for holder, attr, owner, owner_attr in ties:  # plain tensors come back one per holder
        setattr(holder, attr, getattr(owner, owner_attr))
    for name, param in _parameters(model):
        full = full_parameter(model, name, param, seed)
        _local(param).copy_(_local_part(full, param))
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
    """The slice of ``full`` that ``param``'s placements give this rank: the same split
    ``distribute_tensor`` makes, done locally (every rank drew the same ``full``)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(param, DTensor):
        return full
    mine = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
    return mine.to_local()
