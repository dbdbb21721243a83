"""A Slurm job's tasks agree on ``comm`` from the device types their nodes resolved, before the
process group opens (plugins/xirang_slurm/census.py): two types make ``comm=auto`` into
``comm=mixed`` with gloo for the world group; an option that cannot cross types is one error
naming ``comm=mixed``; one type changes nothing. The census itself runs between two real
processes on loopback, each labelled with a type (as tests/plugins/xirang_comm labels its
ranks: this machine has one kind of device), and the process group then opens in the store
rank 0 hosted and all-reduces."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from xirang_slurm.census import agree_on_comm, census

from xirang import ConfigError
from xirang.specs import RunConfig


def run_config(comm: dict[str, Any], device_type: str = "cpu") -> RunConfig:
    runtime = {"device_type": device_type, "collective_backend": "x"}
    return RunConfig({"comm": comm, "runtime": runtime})


def test_one_device_type_changes_nothing() -> None:
    config = run_config({"name": "auto"})
    assert agree_on_comm(config, ["cpu", "cpu", "cpu"]) == (config, "")
    assert config == run_config({"name": "auto"})


def test_two_types_make_comm_auto_mixed_over_gloo() -> None:
    given = run_config({"name": "auto"})
    config, said = agree_on_comm(given, ["cpu", "cuda", "cpu", "cuda"])
    assert config["comm"] == {"name": "mixed"}
    assert config["runtime"]["collective_backend"] == "gloo"
    assert "cpu and cuda" in said and "comm=mixed" in said
    assert given == run_config({"name": "auto"})  # the task's config is derived, not changed


def test_comm_mixed_keeps_its_settings() -> None:
    config, _ = agree_on_comm(run_config({"name": "mixed", "backend": "gloo"}), ["cpu", "rocm"])
    assert config["comm"] == {"name": "mixed", "backend": "gloo"}


def test_an_option_that_cannot_cross_types_is_one_error_naming_mixed() -> None:
    with pytest.raises(ConfigError, match=r"cpu and rocm devices, and comm=powersgd cannot"):
        agree_on_comm(run_config({"name": "powersgd"}), ["rocm", "cpu"])


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
