"""The worker side of a run, for scheduler plugins that start workers themselves: the worker's
entry point (``main(run_dir, config)``), the config file it reads, the variables a scheduler
sets for it (restart count, placed devices, each local rank's device type), device health, the
runtime a node resolves, and the ranks' census of device types that agrees on ``comm``.

The names in ``__all__`` are the stable surface for scheduler plugins. Importing this module
imports torch; the launching side is :mod:`xirang.launch`.
"""

from xirang_core.checkpoint.manager import RESTART_ENV
from xirang_core.faults.health import DEVICES_ENV, drained, local_device
from xirang_core.run import resolve_runtime
from xirang_core.train.census import CENSUS_TIMEOUT, TYPES_ENV, agree_on_comm, census
from xirang_core.train.runconfig import CONFIG_FILE
from xirang_core.train.worker import main

__all__ = [
    "CENSUS_TIMEOUT",
    "CONFIG_FILE",
    "DEVICES_ENV",
    "RESTART_ENV",
    "TYPES_ENV",
    "agree_on_comm",
    "census",
    "drained",
    "local_device",
    "main",
    "resolve_runtime",
]
