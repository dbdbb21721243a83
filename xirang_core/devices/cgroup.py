"""The cgroup v1 CPU controller, as xirang uses it to make a worker a slower device for real.

A worker under a CFS quota (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) computes as a
device that many times slower would: the mechanism behind Kubernetes CPU limits. The local
launcher makes one cgroup per worker (``scheduler.worker_quota``); a drill changes a worker's
quota mid-run (``drill.slow``), and the balancer names a worker's quota in its device, so a
resume under other quotas is a different mix of devices.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from xirang_core.errors import ConfigError

#: the cgroup v1 CPU controller's mount point
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
#: the scheduling period each quota is a share of, in microseconds (the kernel's default)
PERIOD_US = 100_000
#: how the cgroups xirang makes for its workers are named (``xirang-<tag>-w<local rank>``)
PREFIX = "xirang-"


def own_cgroup() -> Path:
    """This process's cgroup of the CPU controller (``/proc/self/cgroup``; the controller's
    root where there is none, as on a system without cgroups v1)."""
    table = Path("/proc/self/cgroup")
    if not table.exists():
        return CPU_CGROUP
    for line in table.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_CGROUP / path.lstrip("/")
    return CPU_CGROUP


def check_quota(quota: Sequence[float]) -> list[float]:
    """``scheduler.worker_quota`` as CPU counts (the local scheduler's and the pool's local
    executor's); a share outside (0, this machine's cores] is refused."""
    cores = os.cpu_count() or 1
    bad = [q for q in quota if not 0 < float(q) <= cores]
    if bad:
        raise ConfigError(
            f"scheduler.worker_quota={list(quota)}: {bad[0]} is not a CPU count in (0, {cores}] "
            f"(this machine has {cores} cores); e.g. scheduler.worker_quota=[1.0,0.4]"
        )
    return [float(q) for q in quota]


def set_cpu_quota(folder: Path, cpus: float) -> None:
    """Let the processes in ``folder`` use ``cpus`` CPUs of each period from now on."""
    (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (folder / "cpu.cfs_quota_us").write_text(str(round(cpus * PERIOD_US)))


def worker_quota() -> float | None:
    """The CPUs this process may use when it runs in a cgroup xirang made for a worker (its
    quota now, which a drill may have changed); None elsewhere."""
    folder = own_cgroup()
    if not folder.name.startswith(PREFIX):
        return None
    quota = int((folder / "cpu.cfs_quota_us").read_text())
    period = int((folder / "cpu.cfs_period_us").read_text())
    return round(quota / period, 4) if quota > 0 else None
