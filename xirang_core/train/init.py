"""Parameter initialisation that does not depend on how the model is split.

Each parameter is drawn from a generator seeded by the run's seed and the parameter's own name,
so a model gets the same initial weights whether it is built whole on one worker, cut into
pipeline stages, or created on the meta device and materialised already sharded: the strategy
equivalence tests rely on it, and a resumed or resharded run never depends on build order.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn


def parameter_generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator for parameter ``name`` under run seed ``seed``."""
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int | None = None) -> None:
    """Initialise every parameter of a materialised, unsplit ``model`` in place through its
    family's ``param_init(name, tensor, generator)``; ``seed`` defaults to torch's initial seed
    (the worker seeds torch with ``config.seed`` before building the model)."""
    seed = torch.initial_seed() if seed is None else seed
    for name, param in model.named_parameters():
        full = torch.empty(param.shape, dtype=param.dtype)
        model.param_init(name, full, parameter_generator(seed, name))
        param.copy_(full)
