"""The device types a run's ranks resolved, told to each other before the process group opens,
and the ``comm`` they agree on from them: one home for every launcher (the local one, torchrun,
Slurm's tasks).

Each type's own library (NCCL, RCCL, HCCL) cannot open one group with another's, so the ranks
first tell each other their types, in the store the process group then opens in: where they
differ, ``comm=auto`` becomes ``comm=mixed`` (each type reduces with its own library, the
types' leaders through gloo), and a ``comm`` option that cannot cross types is one error naming
``comm=mixed``. Where every rank has the same type nothing changes.

A rank's type is the one its launch resolved (``runtime.device_type``), or the entry for its
local rank in :data:`TYPES_ENV` on a node whose ranks drive devices of different types (one
NVIDIA and one AMD card in the same host, say), which no single resolution can see.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from xirang_core.contract import RunConfig
from xirang_core.errors import ConfigError
from xirang_core.plugins import Registry

log = logging.getLogger("xirang.comm")

#: the device type of each local rank on this node, comma-separated (``cuda,rocm``)
TYPES_ENV = "XIRANG_DEVICE_TYPES"
#: how long a rank waits for every other rank's type (a rank that never starts fails the run)
CENSUS_TIMEOUT = timedelta(minutes=10)


def rank_device_type(config: Mapping[str, Any], local_rank: int, environ: Mapping[str, str]) -> str:
    """This rank's device type: its entry in :data:`TYPES_ENV`, else the run's resolved one."""
    named = [kind.strip() for kind in environ.get(TYPES_ENV, "").split(",") if kind.strip()]
    if not named:
        return str(config["runtime"]["device_type"])
    if local_rank >= len(named):
        raise ConfigError(
            f"{TYPES_ENV}={environ[TYPES_ENV]} names {len(named)} device type(s), but this node "
            f"runs local rank {local_rank}; name one type per local rank (e.g. cuda,rocm)"
        )
    return named[local_rank]


def census(store: Any, rank: int, world: int, device_type: str) -> list[str]:
    """Every rank's device type, by rank, once all have told theirs through ``store``."""
    import torch.distributed as dist

    types = dist.PrefixStore("/xirang/census", store)
    types.set(str(rank), device_type)
    types.wait([str(other) for other in range(world)], CENSUS_TIMEOUT)
    return [types.get(str(other)).decode() for other in range(world)]


def agree_on_comm(config: RunConfig, types: list[str], registry: Registry) -> tuple[RunConfig, str]:
    """The run's config with its ``comm`` agreed for the ranks' ``types``, and what was decided,
    in words ("" when every rank resolved the same type)."""
    kinds = sorted(set(types))
    if len(kinds) < 2:
        return config, ""
    name = config["comm"]["name"]
    if name not in ("auto", "mixed"):
        raise ConfigError(
            f"this run's ranks resolved {' and '.join(kinds)} devices, and comm={name} cannot "
            f"reduce across device types; use comm=mixed (or leave comm=auto, which picks it)"
        )
    comm = config["comm"] if name == "mixed" else {"name": "mixed"}
    runtime = config["runtime"]
    backend = registry.create("comm", comm).backend_for(runtime["device_type"])
    config = config.replace(comm=comm, runtime={**runtime, "collective_backend": backend})
    return config, (
        f"ranks resolved {' and '.join(kinds)} devices: comm=mixed (each type reduces with its "
        f"own library, the types' leaders through {backend})"
    )


def agreed_config(
    config: RunConfig, store: Any, rank: int, local_rank: int, registry: Registry
) -> RunConfig:
    """A worker's config once the ranks in ``store`` agreed on ``comm`` (rank 0 logs a change):
    the run's own when ``comm`` is already settled or every rank has the same type."""
    if config["comm"]["name"] != "auto":
        return config
    mine = rank_device_type(config, local_rank, os.environ)
    types = census(store, rank, int(os.environ.get("WORLD_SIZE", "1")), mine)
    if len(set(types)) < 2:
        return config
    config = config.replace(runtime={**config["runtime"], "device_type": mine})
    config, said = agree_on_comm(config, types, registry)
    if rank == 0:
        log.warning("%s", said)
    return config
