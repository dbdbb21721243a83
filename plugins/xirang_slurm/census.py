"""The device types a Slurm job's tasks resolved, agreed by every task before its process
group opens.

Each task resolves the run's device on its own node, so ``device=auto`` over nodes of two
vendors gives two types. The tasks tell each other their types and agree on ``comm`` with the
kernel's census (:func:`xirang.worker.census`, :func:`xirang.worker.agree_on_comm`, which every
launcher's workers use): where the types differ, ``comm=auto`` becomes ``comm=mixed``.

The tasks meet in the store torch's rendezvous would open at ``MASTER_ADDR:MASTER_PORT``:
rank 0 hosts it here, as ``init_process_group``'s ``env://`` would, and the process group then
joins it as an agent's store (``TORCHELASTIC_USE_AGENT_STORE``), so the job needs no second
port and the group's keys stay apart from the census's.
"""

from __future__ import annotations

import os
from typing import Any

#: rank 0's store lives as long as its process: the process group's rendezvous is in it
_HOSTED: list[Any] = []


def task_census(rank: int, world: int, device_type: str) -> list[str]:
    """Every task's device type, by rank, once all have told theirs (rank 0 hosts the store)."""
    import torch.distributed as dist

    from xirang.worker import CENSUS_TIMEOUT, census  # torch: only where a task runs

    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(
        host, port, world, is_master=rank == 0, timeout=CENSUS_TIMEOUT, wait_for_workers=False
    )
    if rank == 0:
        _HOSTED.append(store)
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"  # the group joins this store
    return census(store, rank, world, device_type)
