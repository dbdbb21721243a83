"""Run a function on N gloo (or device) workers on this machine and collect what each returns.

The scaling benchmark and the tests both need "the same function on 1, 2, 4 ranks": this spawns
the ranks, gives each an initialised process group (meeting in a file, no port), and hands
back the per-rank results in rank order. Worker failures re-raise in the caller with the
worker's traceback.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the torch module whose current device a backend's collectives run on (RCCL is "nccl")
DEVICE_MODULE: dict[str, str] = {"nccl": "cuda", "hccl": "npu"}


def run_group(
    fn: Callable[..., Any], world: int, *args: Any, backend: str = "gloo", threads: int = 1
) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` spawned ranks inside a process group; returns the
    results in rank order. ``threads`` caps each rank's intra-op threads (ranks share cores)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="xirang-group-") as folder:
        try:
            mp.spawn(
                _rank_main,
                args=(world, backend, threads, folder, fn, args),
                nprocs=world,
                join=True,
            )
        except mp.ProcessExitedException:
            # once one rank passed the exit barrier every rank had delivered its result, so a
            # signal after that is torch's process-group teardown, not the work: results stand
            if not any((Path(folder) / f"{r}.left").exists() for r in range(world)):
                raise
        return [pickle.loads((Path(folder) / f"{r}.pkl").read_bytes()) for r in range(world)]


def _rank_main(
    rank: int,
    world: int,
    backend: str,
    threads: int,
    folder: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    import gc

    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    bind_device(backend, rank)
    # the ranks meet in a file of the group's own folder: a free port picked by the parent
    # could be taken by another process before rank 0 listened on it (EADDRINUSE, seen in CI)
    store = Path(folder) / "rendezvous"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = fn(rank, world, *args)
        (Path(folder) / f"{rank}.pkl").write_bytes(pickle.dumps(result))
        # wrappers caught in reference cycles (DDP and its comm hooks) must go while the group
        # still exists; rank 0 hosts the store, so leaving together keeps it alive until every
        # rank is done with it (a rank whose store vanished mid-teardown was seen to abort)
        del result
        gc.collect()
        dist.barrier()
        (Path(folder) / f"{rank}.left").touch()
    finally:
        dist.destroy_process_group()


def bind_device(backend: str, local_rank: int) -> None:
    """Make ``local_rank``'s device current before the group opens: NCCL and HCCL put a rank's
    communicator (and every barrier) on the current device, which is device 0 until set, so
    without this every rank of a machine would talk through the first GPU. gloo needs none."""
    name = DEVICE_MODULE.get(backend)
    if name is None:
        return
    import torch

    getattr(torch, name).set_device(local_rank)
