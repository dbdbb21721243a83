"""Every launcher's ranks tell each other their device types before the process group opens,
and agree on ``comm`` from them (xirang_core/train/census.py): two types make ``comm=auto``
into ``comm=mixed`` with gloo for the world group, an option that cannot cross types is one
error naming ``comm=mixed``, one type changes nothing. The census runs in the worker's own
``open_worker`` between two real processes, each rank's type from ``XIRANG_DEVICE_TYPES`` as a
user sets it on a node with two kinds of device (this machine has one kind: both ranks compute
on the CPU)."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.parallel.conftest import TINY
from xirang_core.config import compose
from xirang_core.contract import RunConfig
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.train.census import TYPES_ENV, agree_on_comm, rank_device_type


def run_config(comm: dict[str, Any], device_type: str = "cpu") -> RunConfig:
    runtime = {"device_type": device_type, "collective_backend": "x"}
    return RunConfig({"comm": comm, "runtime": runtime})


def test_one_device_type_changes_nothing() -> None:
    config = run_config({"name": "auto"})
    assert agree_on_comm(config, ["cpu", "cpu", "cpu"], get_registry()) == (config, "")


def test_two_types_make_comm_auto_mixed_over_gloo() -> None:
    given = run_config({"name": "auto"})
    config, said = agree_on_comm(given, ["cpu", "cuda", "cpu", "cuda"], get_registry())
    assert config["comm"] == {"name": "mixed"}
    assert config["runtime"]["collective_backend"] == "gloo"
    assert "cpu and cuda" in said and "comm=mixed" in said
    assert given == run_config({"name": "auto"})  # the rank's config is derived, not changed


def test_comm_mixed_keeps_its_settings() -> None:
    mixed = run_config({"name": "mixed", "backend": "gloo"})
    config, _ = agree_on_comm(mixed, ["cpu", "rocm"], get_registry())
    assert config["comm"] == {"name": "mixed", "backend": "gloo"}


def test_an_option_that_cannot_cross_types_is_one_error_naming_mixed() -> None:
    with pytest.raises(ConfigError, match=r"cpu and rocm devices, and comm=powersgd cannot"):
        agree_on_comm(run_config({"name": "powersgd"}), ["rocm", "cpu"], get_registry())


def test_a_rank_type_comes_from_its_local_rank_entry_else_the_run() -> None:
    config = run_config({"name": "auto"})
    assert rank_device_type(config, 1, {}) == "cpu"
    assert rank_device_type(config, 1, {TYPES_ENV: "cuda, rocm"}) == "rocm"
    with pytest.raises(ConfigError, match=r"names 1 device type\(s\), but this node runs local"):
        rank_device_type(config, 1, {TYPES_ENV: "cuda"})


def _rank(rank: int, port: int, types: str, out: str) -> None:
    """One worker as the elastic agent starts it: its store, then ``open_worker``."""
    import logging

    import torch.distributed as dist

    from xirang_core.train.worker import open_worker

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", **{TYPES_ENV: types})
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("xirang.comm").addHandler(handler)
    config = compose([*TINY, "device=cpu", "parallel=ddp", "trainer.nproc=2"])
    config = config.replace(runtime={"device_type": "cpu", "collective_backend": "gloo"})
    agent = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, wait_for_workers=False)
    ctx = open_worker(config, out, get_registry())
    backend = dist.get_backend()
    dist.barrier()
    dist.destroy_process_group()
    del agent
    found = {"comm": ctx.config["comm"], "type": ctx.config["runtime"]["device_type"]}
    Path(out, f"{rank}.json").write_text(json.dumps({**found, "backend": backend, "said": said}))


def open_two(types: str, out: Path) -> list[dict[str, Any]]:
    """Both ranks' agreed comm, device type, world backend and warnings."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    ranks = [spawn.Process(target=_rank, args=(r, port, types, str(out))) for r in (0, 1)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(300)
        assert rank.exitcode == 0
    return [json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1)]


def test_ranks_of_two_types_open_their_group_with_comm_mixed(tmp_path: Path) -> None:
    zero, one = open_two("cpu,cuda", tmp_path)
    assert zero["comm"] == one["comm"] == {"name": "mixed"}
    assert zero["backend"] == one["backend"] == "gloo"
    assert (zero["type"], one["type"]) == ("cpu", "cuda")  # comm=mixed groups by these
    assert any("ranks resolved cpu and cuda devices: comm=mixed" in s for s in zero["said"])


def test_ranks_of_one_type_keep_the_default(tmp_path: Path) -> None:
    zero, one = open_two("cpu,cpu", tmp_path)
    assert zero["comm"] == one["comm"] == {"name": "auto"}
    assert zero["backend"] == one["backend"] == "gloo"
    assert not any("comm=mixed" in s for s in zero["said"] + one["said"])
