"""``scheduler.worker_quota``: each local worker under its own CPU quota, a slower device made real.

A list of CPU counts, one per worker on this node (``[1.0, 0.4]``: worker 0 may use one core,
worker 1 four tenths of one). Each worker runs in its own cgroup of the CPU controller whose
CFS quota is that share of each period: the mechanism behind Kubernetes CPU limits, so a worker
under 0.4 computes as a device about 2.5 times slower would, and xirang's own calibration in
that worker measures it so. Cgroup v1 (``/sys/fs/cgroup/cpu``, writable by root) is what this
uses; the cgroups are made before the workers start and removed after they end, each with an
event saying how often the kernel throttled it.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from xirang import ConfigError
from xirang.launch import (
    CPU_CGROUP,
    CPU_CGROUP_PREFIX,
    own_cgroup,
    record_event,
    set_cpu_quota,
)

#: the worker's cgroup folders, by local rank, for the worker to join (set by the launcher)
CGROUPS_ENV = "XIRANG_WORKER_CGROUPS"


@contextlib.contextmanager
def worker_cgroups(quota: Sequence[float], nproc: int, run_dir: str) -> Iterator[list[Path]]:
    """One cgroup per local worker with its quota, for the attempt; removed after, with an
    event per worker saying its quota and how many periods the kernel throttled it."""
    if len(quota) != nproc:
        raise ConfigError(
            f"scheduler.worker_quota has {len(quota)} value(s) for {nproc} worker(s) on this "
            f"node (trainer.nproc={nproc}): give one CPU count per worker"
        )
    _check_controller()
    tag, home = f"{CPU_CGROUP_PREFIX}{uuid.uuid4().hex[:8]}", own_cgroup()
    made: list[Path] = []
    try:
        for rank, cpus in enumerate(quota):
            made.append(_make(CPU_CGROUP / f"{tag}-w{rank}", cpus))
        os.environ[CGROUPS_ENV] = os.pathsep.join(map(str, made))
        yield made
    finally:
        os.environ.pop(CGROUPS_ENV, None)
        for rank, folder in enumerate(made):
            record_event(run_dir, "worker_quota", rank=rank, cpus=quota[rank], **_stat(folder))
            _remove(folder, home)


@contextlib.contextmanager
def process_under_quota(pid: int, cpus: float, name: str) -> Iterator[Path]:
    """A running process, and what it starts from now on, under a quota of ``cpus`` for a
    while: a Slurm test bed's ``slurmd``, whose node then computes as a slower machine (its job
    steps stay in its cgroup: ``proctrack/linuxproc``). The process goes back to its own
    cgroup after, and the one made here (``xirang-<name>-…``) is removed."""
    _check_controller(f"putting process {pid} under a CPU quota")
    home = cgroup_of(pid)
    folder = _make(CPU_CGROUP / f"{CPU_CGROUP_PREFIX}{name}-{uuid.uuid4().hex[:8]}", cpus)
    try:
        (folder / "cgroup.procs").write_text(str(pid))
        yield folder
    finally:
        with contextlib.suppress(OSError):  # it ended meanwhile
            (home / "cgroup.procs").write_text(str(pid))
        _remove(folder, home)


def cgroup_of(pid: int) -> Path:
    """Process ``pid``'s cgroup of the CPU controller (the controller's root where it has
    none)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_CGROUP / path.lstrip("/")
    return CPU_CGROUP


def _check_controller(what: str = "scheduler.worker_quota") -> None:
    if not (CPU_CGROUP / "cpu.cfs_quota_us").exists() or not os.access(CPU_CGROUP, os.W_OK):
        raise ConfigError(
            f"{what} needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (run as "
            f"root); this machine has no such writable controller. Leave "
            f"scheduler.worker_quota empty ([]) to run the workers without a quota"
        )


def _make(folder: Path, cpus: float) -> Path:
    folder.mkdir()
    set_cpu_quota(folder, cpus)
    return folder


def _stat(folder: Path) -> dict[str, int]:
    """The kernel's count of periods and throttled periods (``cpu.stat``)."""
    fields = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
    return {"periods": int(fields["nr_periods"]), "throttled": int(fields["nr_throttled"])}


def _remove(folder: Path, home: Path) -> None:
    """Move what is left in the cgroup back ``home`` (an in-process worker is this process;
    an orphan of a killed worker may linger), then remove it: the kernel needs it empty."""
    for pid in (folder / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):  # it ended meanwhile
            (home / "cgroup.procs").write_text(pid)
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except OSError:  # a process still leaving
            time.sleep(0.1)
    folder.rmdir()


def join(folder: Path) -> None:
    """Put this process (and the threads and processes it starts after) in ``folder``."""
    (folder / "cgroup.procs").write_text(str(os.getpid()))


def own_worker_cgroup() -> Path | None:
    """The cgroup the launcher made for this worker (by ``LOCAL_RANK``); None without
    ``worker_quota``."""
    if CGROUPS_ENV not in os.environ:
        return None
    folders = os.environ[CGROUPS_ENV].split(os.pathsep)
    return Path(folders[int(os.environ["LOCAL_RANK"])])
