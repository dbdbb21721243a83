"""The CPU cores a run really has, and OpenMP settings that survive a shared node.

``os.cpu_count()`` is the host's CPUs, not the run's: a container's CPU quota, a ``taskset``
mask or a Slurm allocation gives a process fewer, and the other workers of the run on this node
share them. Torch started with a thread per host CPU on a loaded host, and its OpenMP threads
then spun against each other and against the other work: a run with the default threads ran
4.6-5.9x slower than with one thread. So threads are chosen from the cores the run may use
(affinity, the cgroup CPU quota) divided among the node's workers, and OpenMP waits with a
bounded spin (:func:`omp_defaults`).

Nothing here imports torch: :func:`omp_defaults` must run before torch loads its OpenMP
runtime, which reads those settings once, when it loads.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")
#: set in a worker that its launcher bound to its own CPUs (:func:`bind_cpus`): its affinity is
#: then its part of the node's cores, not the run's to divide among the node's workers
BOUND_ENV = "XIRANG_CPUS_BOUND"
#: OpenMP waiting that a shared node survives, set for a run unless the user chose a policy:
#: libgomp (torch's Linux wheels) spins 1000 times at a barrier before it sleeps, instead of
#: its default 300,000 (~3 ms, which busy cores stretch to the whole step); Intel's OpenMP
#: (conda builds) sleeps after 1 ms instead of 200 ms
OMP_DEFAULTS = {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "1"}
#: how much of a core other work may take before the start-up warning: the launching process
#: itself (imports, calibration) shows in the load average
BUSY_MARGIN = 0.5


def omp_defaults(environ: MutableMapping[str, str]) -> None:
    """Put :data:`OMP_DEFAULTS` in ``environ`` (the process's, before torch is imported: the
    workers inherit it), leaving alone every setting the user made: a user's
    ``OMP_WAIT_POLICY`` keeps all of them out."""
    if "OMP_WAIT_POLICY" in environ:
        return
    for key, value in OMP_DEFAULTS.items():
        environ.setdefault(key, value)


def available_cores(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> int:
    """Cores this process may compute on: its CPU affinity, lowered to a cgroup CPU quota
    (whole cores, at least one: threads beyond a quota are throttled, not run)."""
    cores = _affinity()
    quota = cgroup_quota_cores(root, membership)
    return max(1, min(cores, math.floor(quota))) if quota else cores


def default_threads(local_workers: int, cores: int | None = None) -> int:
    """Threads per worker when ``trainer.threads=0``: the run's cores shared by the
    ``local_workers`` of this node, at least one each (all of a worker's own cores when its
    launcher bound it to them: :func:`bind_cpus`)."""
    if os.environ.get(BOUND_ENV):
        local_workers = 1
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, local_workers))


def cpu_slices(cpus: list[int], workers: int) -> list[list[int]]:
    """``cpus`` cut into ``workers`` equal runs of neighbours (what Slurm's
    ``--cpu-bind=cores`` gives the tasks of a node), the remainder left unused so that every
    worker has as many; empty when there are fewer CPUs than workers."""
    ordered, each = sorted(cpus), len(cpus) // max(1, workers)
    return [ordered[i * each : (i + 1) * each] for i in range(workers)] if each else []


def bind_cpus(cpus: list[int]) -> None:
    """Run this process, every thread it has and every one it starts, on ``cpus`` only: a
    worker then keeps its caches and never waits behind another worker for a core, as a
    device of its own does. Marks the process bound (:data:`BOUND_ENV`)."""
    for thread in Path("/proc/self/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(thread.name), cpus)
    os.environ[BOUND_ENV] = ",".join(map(str, cpus))


def cgroup_quota_cores(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> float | None:
    """The tightest CPU quota on this process's cgroup and its ancestors, in cores (v1
    ``cpu.cfs_quota_us / cpu.cfs_period_us``, v2 ``cpu.max``); None when unlimited or
    unreadable. ``membership`` is ``/proc/self/cgroup``; ``root`` where cgroups are mounted."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:  # v2 (alone, or a hybrid's unified tree)
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            quotas += [q for d in _cgroup_dirs(base, path) if (q := _v2_quota(d))]
        elif "cpu" in controllers.split(","):
            for base in {root / controllers, root / "cpu"}:
                quotas += [q for d in _cgroup_dirs(base, path) if (q := _v1_quota(d))]
    return min(quotas, default=None)


def _cgroup_dirs(base: Path, path: str) -> Iterator[Path]:
    """The cgroup's folder under ``base`` and its ancestors up to ``base``. Inside a container
    the path named may be the host's, absent from the container's mount: then ``base`` only."""
    here = base / path.lstrip("/")
    while here != base and base in here.parents:
        if here.is_dir():
            yield here
        here = here.parent
    if base.is_dir():
        yield base


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def _affinity() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def host_load() -> float:
    """The host's load average over the last minute (0 where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return 0.0


def busy_warning(load: float, cores: int, host_cpus: int | None = None) -> str | None:
    """Why this run will not have its ``cores`` to itself, else None: other work (``load``,
    the host's load average) leaves fewer than ``cores`` of the host's CPUs free."""
    host_cpus = host_cpus or os.cpu_count() or 1
    free = host_cpus - load
    if free >= cores - BUSY_MARGIN:
        return None
    return (
        f"the host is busy: load average {load:.2f} on {host_cpus} CPUs leaves {max(free, 0):.1f} "
        f"of this run's {cores} cores free, so steps will be slower and their times vary "
        f"(other work competes for the cores; trainer.threads=N sets the threads per worker)"
    )
