"""``scheduler.cpu_bind=cores``: each local worker on CPUs of its own.

Unbound, the kernel moves a node's workers between its cores as it sees fit: two workers of
one run take turns on a core while another idles, and each loses its caches on a move. Bound
(Slurm's ``--cpu-bind=cores``, torch's ``xeon.run_cpu`` launcher), each worker computes on an
equal run of neighbouring CPUs of the launcher's own (its affinity: a ``taskset`` or Slurm
allocation is kept), as a device of its own would, and its default thread count
(``trainer.threads=0``) is those CPUs. ``none`` (the default, as torchrun) leaves placement to
the kernel, which shares a node better with other work.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from xirang import ConfigError
from xirang.launch import bind_cpus, cpu_slices, record_event

#: the workers' CPUs, by local rank (``0,1;2,3``), for each worker to bind itself to
CPUS_ENV = "XIRANG_WORKER_CPUS"
#: what ``scheduler.cpu_bind`` may say
BINDS = ("none", "cores")


def check_bind(bind: str) -> str:
    """``bind`` when it is one of :data:`BINDS`; else the one line that says what is."""
    if bind not in BINDS:
        raise ConfigError(f"scheduler.cpu_bind={bind!r}: one of {', '.join(BINDS)}")
    return bind


@contextlib.contextmanager
def worker_cpus(bind: str, nproc: int) -> Iterator[bool]:
    """Each of the ``nproc`` workers' CPUs for one attempt, in the environment the workers
    inherit; yields whether it gave any (not unbound, nor for one worker, which has all)."""
    if bind == "none" or nproc == 1:
        yield False
        return
    cpus = sorted(os.sched_getaffinity(0))
    slices = cpu_slices(cpus, nproc)
    if not slices:
        raise ConfigError(
            f"scheduler.cpu_bind=cores: {nproc} workers on this node but only {len(cpus)} "
            f"CPU(s) to run on ({','.join(map(str, cpus))}); use trainer.nproc<={len(cpus)} "
            "or scheduler.cpu_bind=none"
        )
    os.environ[CPUS_ENV] = ";".join(",".join(map(str, part)) for part in slices)
    try:
        yield True
    finally:
        os.environ.pop(CPUS_ENV, None)


def bind_worker(run_dir: str) -> None:
    """Bind this worker to the CPUs the launcher gave its local rank, if it gave any, and
    record in an event the CPUs its threads may now run on (as the kernel says)."""
    if CPUS_ENV not in os.environ:
        return
    rank = int(os.environ["LOCAL_RANK"])
    bind_cpus([int(cpu) for cpu in os.environ[CPUS_ENV].split(";")[rank].split(",")])
    tasks = Path("/proc/self/task").iterdir()
    cpus = set().union(*(os.sched_getaffinity(int(thread.name)) for thread in tasks))
    record_event(run_dir, "worker_cpus", rank=rank, cpus=sorted(cpus))
