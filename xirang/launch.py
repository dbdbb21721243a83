"""What a scheduler plugin uses to start a run's workers and follow them, on the launching
side: the recovery events log, the worker count a config needs and why it may not fit, the
interrupt a stop request raises, and the run-summary and resume modules.

``report`` and ``resume`` are the kernel modules themselves. The names in ``__all__`` are the
stable surface for scheduler plugins. Importing this module does not import torch; the worker
side is :mod:`xirang.worker`.
"""

from xirang.balance import balance_placement
from xirang.balance import check as check_balance
from xirang_core.checkpoint.events import read_events, record_event, recovery_note
from xirang_core.config import run_workers
from xirang_core.devices.cgroup import (
    CPU_CGROUP,
    check_quota,
    own_cgroup,
    set_cpu_quota,
    worker_quota,
)
from xirang_core.devices.cgroup import PREFIX as CPU_CGROUP_PREFIX
from xirang_core.devices.cores import bind_cpus, cpu_slices
from xirang_core.parallel.plan import workers_problem
from xirang_core.train import report, resume
from xirang_core.train.cost import pending_charges
from xirang_core.train.interrupt import RunInterrupted, stop_on
from xirang_core.train.report import SUMMARY_FILE
from xirang_core.train.runconfig import CONFIG_FILE, read_config, write_config
from xirang_core.train.segments import SEGMENTS_FILE

__all__ = [
    "CONFIG_FILE",
    "CPU_CGROUP",
    "CPU_CGROUP_PREFIX",
    "SEGMENTS_FILE",
    "SUMMARY_FILE",
    "RunInterrupted",
    "balance_placement",
    "bind_cpus",
    "check_balance",
    "check_quota",
    "cpu_slices",
    "own_cgroup",
    "pending_charges",
    "read_config",
    "read_events",
    "record_event",
    "recovery_note",
    "report",
    "resume",
    "run_workers",
    "set_cpu_quota",
    "stop_on",
    "worker_quota",
    "workers_problem",
    "write_config",
]
