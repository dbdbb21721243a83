"""The device types a Slurm job's tasks resolved, agreed by every task before its process
group opens.

Each task resolves the run's device on its own node, so ``device=auto`` over nodes of two
vendors gives two types, and each type's own library (NCCL, RCCL, HCCL) cannot open one group
with another's. So the tasks first tell each other their types: where they differ,
``comm=auto`` becomes ``comm=mixed`` (each type reduces with its own library, the types'
leaders through gloo: :mod:`xirang_comm.mixed`), and a ``comm`` option that cannot cross types
is one error naming ``comm=mixed``.

The tasks meet in the store torch's rendezvous would open at ``MASTER_ADDR:MASTER_PORT``:
rank 0 hosts it here, as ``init_process_group``'s ``env://`` would, and the process group then
joins it as an agent's store (``TORCHELASTIC_USE_AGENT_STORE``), so the job needs no second
port and the group's keys stay apart from the census's.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from xirang import ConfigError, get_registry
from xirang.specs import RunConfig

#: how long a task waits for every other task's type (a task that never starts fails the job)
CENSUS_TIMEOUT = timedelta(minutes=10)
#: rank 0's store lives as long as its process: the process group's rendezvous is in it
_HOSTED: list[Any] = []


def census(rank: int, world: int, device_type: str) -> list[str]:
    """Every task's device type, by rank, once all have told theirs."""
    import torch.distributed as dist

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(
        host, port, world, is_master=rank == 0, timeout=CENSUS_TIMEOUT, wait_for_workers=False
    )
    if rank == 0:
        _HOSTED.append(store)
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the group joins this store
    types = dist.PrefixStore("/xirang/census", store)
    types.set(str(rank), device_type)
    return [types.get(str(other)).decode() for other in range(world)]


def agree_on_comm(config: RunConfig, types: list[str]) -> tuple[RunConfig, str]:
    """The run's config with its ``comm`` agreed for the tasks' ``types``, and what was decided,
    in words ("" when every task resolved the same type)."""
    kinds = sorted(set(types))
    if len(kinds) < 2:
        return config, ""
    name = config["comm"]["name"]
    if name not in ("auto", "mixed"):
        raise ConfigError(
            f"this job's nodes resolved {' and '.join(kinds)} devices, and comm={name} cannot "
            f"reduce across device types; use comm=mixed (or leave comm=auto, which picks it)"
        )
    comm = config["comm"] if name == "mixed" else {"name": "mixed"}
    runtime = config["runtime"]
    backend = get_registry().create("comm", comm).backend_for(runtime["device_type"])
    config = config.replace(comm=comm, runtime={**runtime, "collective_backend": backend})
    return config, (
        f"nodes resolved {' and '.join(kinds)} devices: comm=mixed (each type reduces with its "
        f"own library, the types' leaders through {backend})"
    )
