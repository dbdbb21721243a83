"""A Slurm job's tasks tell each other the device types their nodes resolved before the process
group opens (plugins/xirang_slurm/census.py; the decision from the types is the kernel's,
tests/train/test_census.py). The census runs between two real processes on loopback, each
labelled with a type (this machine has one kind of device), and the process group then opens in
the store rank 0 hosted and all-reduces."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path

from xirang_slurm.census import task_census as census


def _task(rank: int, port: int, device_type: str, out: str) -> None:
    """One task: the census, then the process group as the worker opens it (in the store)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.update(RANK=str(rank), WORLD_SIZE="2")
    import torch
    import torch.distributed as dist

    from xirang_core.train.worker import restart_store

    types = census(rank, 2, device_type)
    store = restart_store(2)  # the worker's own path: the hosted store, as an agent's
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(json.dumps({"types": types, "sum": total.item()}))


def test_two_tasks_tell_their_types_and_open_the_group_in_the_same_store(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    tasks = [
        spawn.Process(target=_task, args=(rank, port, kind, str(tmp_path)))
        for rank, kind in enumerate(["cuda", "rocm"])
    ]
    for task in tasks:
        task.start()
    for task in tasks:
        task.join(120)
        assert task.exitcode == 0
    for rank in (0, 1):
        found = json.loads((tmp_path / f"{rank}.json").read_text())
        assert found == {"types": ["cuda", "rocm"], "sum": 3.0}
