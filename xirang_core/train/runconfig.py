"""A run's ``config.yaml``: the resolved config every worker reads from the run directory."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from xirang_core.config import check_written
from xirang_core.contract import RunConfig
from xirang_core.plugins import Registry

CONFIG_FILE = "config.yaml"


def read_config(run_dir: str | Path) -> RunConfig:
    """The run's config as written, read-only (a launcher that changes it for the workers
    derives a new one with ``replace`` and writes that); a worker reads it checked, through
    :func:`worker_config`."""
    return RunConfig(yaml.safe_load((Path(run_dir) / CONFIG_FILE).read_text()))


def worker_config(
    run_dir: str | Path, registry: Registry, given: Mapping[str, Any] | None = None
) -> RunConfig:
    """The config a worker starts from, checked against the run's contract and frozen:
    ``given`` when its launcher resolved the runtime in the worker's own process (Slurm's
    tasks), else the run directory's ``config.yaml``."""
    path = Path(run_dir) / CONFIG_FILE
    data = yaml.safe_load(path.read_text()) if given is None else given
    return check_written(data, registry, str(path))


def write_config(config: dict[str, Any], run_dir: str | Path) -> None:
    """The run's ``config.yaml``, atomically: with trainer.nnodes>1 every node's launcher
    writes it into the shared run directory while another node's workers may be reading it."""
    run_dir = Path(run_dir)
    tmp = run_dir / f".{CONFIG_FILE}.{socket.gethostname()}.{os.getpid()}"
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(run_dir / CONFIG_FILE)
