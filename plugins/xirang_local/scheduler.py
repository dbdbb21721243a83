"""Run a job on this machine.

One worker runs in the calling process, so a progress bar and a debugger work as usual. Several
workers run under torch's elastic agent with a private rendezvous on loopback; every worker gets
the run directory that the caller created, so one run has one directory.

With ``trainer.nnodes>1`` the same command on every node forms one job through a c10d
rendezvous at node 0's ``trainer.rdzv_endpoint`` (:mod:`xirang_local.nodes`); a node that goes
away ends the others' step with an error that says so, and the same command on every node
resumes the job.

Workers go on healthy devices only (each device's health probe is asked before every launch).
When a worker fails, the scheduler restarts the run, up to ``trainer.max_restarts`` times, from
its latest checkpoint: on the same devices after a plain crash, or without a device that its
probe now drains or whose worker's heartbeat went stale, with fewer workers if need be.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from xirang import ConfigError, XirangError, get_registry, peer_lost
from xirang.launch import (
    RunInterrupted,
    check_quota,
    read_events,
    record_event,
    recovery_note,
    workers_problem,
)
from xirang.specs import JobSpec, SchedulerBase
from xirang.worker import DEVICES_ENV, RESTART_ENV
from xirang_local.binding import bind_worker, check_bind, worker_cpus
from xirang_local.devices import Eviction, LocalDevices
from xirang_local.nodes import NodeLost, Nodes
from xirang_local.quota import join, own_worker_cgroup, worker_cgroups
from xirang_local.settings import LocalConfig

log = logging.getLogger("xirang.local")


class WorkerFailed(XirangError):
    exit_code = 1


class LocalScheduler(SchedulerBase):
    def __init__(self, **settings: Any) -> None:
        config = LocalConfig(**settings)
        self.quota, self.bind = check_quota(config.worker_quota), check_bind(config.cpu_bind)

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        devices = LocalDevices.of_run(job.run_dir, get_registry())
        nodes = Nodes.of_job(job)
        nodes.check_run_dir(job.run_dir)
        restarts = 0
        while True:
            placed = _placement(devices, job, restarts)
            started = len(read_events(job.run_dir))  # this attempt's events come after
            with (
                _worker_env(placed, restarts),
                self._quota(job, len(placed)) as cgroups,
                worker_cpus(self.bind, len(placed)) as bound,
            ):
                if job.nproc == 1 and job.max_restarts == 0 and not nodes.multi:
                    if cgroups:
                        join(cgroups[0])  # this process, until the cgroup is removed
                    entrypoint(job.run_dir)
                    return
                if cgroups or bound:
                    inner = functools.partial(_start_worker, entrypoint)
                    entrypoint = functools.update_wrapper(inner, entrypoint)  # named in logs
                failure = _attempt(job, entrypoint, len(placed), nodes)
            if failure is None:
                nodes.check_summary(job.run_dir)
                return
            if restarts >= job.max_restarts:
                raise _stopped_by_peer(failure, job) or WorkerFailed(
                    _describe_failure(failure, job, len(placed) * nodes.count, restarts)
                    + nodes.lost_hint()
                )
            restarts += 1
            evicted = devices.evict_failed(placed, job.run_dir, started)
            _report_restart(job, devices, evicted, placed, restarts)

    def _quota(self, job: JobSpec, nproc: int) -> contextlib.AbstractContextManager[list[Path]]:
        """The workers' cgroups for one attempt, or none without ``worker_quota``."""
        if not self.quota:
            return contextlib.nullcontext([])
        return worker_cgroups(self.quota, nproc, job.run_dir)


def _start_worker(entrypoint: Callable[[str], Any], run_dir: str) -> Any:
    """An elastic worker's entry point, run in the cgroup (``worker_quota``) and on the CPUs
    (``cpu_bind``) the launcher made for its local rank (a module-level function, so spawned
    workers can unpickle it)."""
    cgroup = own_worker_cgroup()
    if cgroup is not None:
        join(cgroup)
    bind_worker(run_dir)
    return entrypoint(run_dir)


@contextlib.contextmanager
def _worker_env(placed: list[int], restarts: int) -> Iterator[None]:
    """The placement and restart count, in the environment the workers inherit, for the
    attempt only (a later run in this process starts clean)."""
    values = {DEVICES_ENV: ",".join(map(str, placed)), RESTART_ENV: str(restarts)}
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _placement(devices: LocalDevices, job: JobSpec, restarts: int) -> list[int]:
    """Healthy devices for the next attempt; a clear error when none are left."""
    for eviction in devices.probe():
        _report_eviction(job, eviction)
    placed = devices.place(job.nproc)
    if len(placed) < job.nproc and not devices.evicted:  # the plan, not the hardware
        raise ConfigError(
            f"this run cannot start on {job.nproc} worker(s): "
            f"{workers_problem(job.nproc, devices.config)}"
        )
    if not placed:
        evicted = "; ".join(f"device {i}: {why}" for i, why in devices.evicted.items())
        raise WorkerFailed(
            f"no healthy local device left to run on after {restarts} restart(s) "
            f"({evicted}); fix or replace them, then resume: {recovery_note(job.run_dir)}"
        )
    return placed


def _attempt(job: JobSpec, entrypoint: Callable[[str], Any], nproc: int, nodes: Nodes) -> Any:
    """One launch of ``nproc`` workers on this node (of ``nodes``); the elastic failure, or
    None when they all finished."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
    elastic_log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    if not any(isinstance(f, UserErrorFilter) for f in elastic_log.filters):
        elastic_log.addFilter(UserErrorFilter())
    rendezvous: dict[str, Any] = {
        "min_nodes": 1,
        "max_nodes": 1,
        "run_id": f"xirang-{uuid.uuid4().hex[:8]}",
        "rdzv_endpoint": "127.0.0.1:0",
    }
    if nodes.multi:
        rendezvous = nodes.launch_settings(job.run_dir)
    config = LaunchConfig(
        nproc_per_node=nproc,
        rdzv_backend="c10d",
        max_restarts=0,  # restarts are this scheduler's: it may move them to other devices
        monitor_interval=0.1,
        start_method="spawn",
        **rendezvous,
    )
    where = f" on {nodes.label()}, meeting the others at {nodes.endpoint}" if nodes.multi else ""
    print(  # spawning, importing torch and joining the group takes a while before step 1
        f"xirang: starting {nproc} workers{where} (each imports torch, joins the process group "
        "and builds its part of the model before the first step) ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        elastic_launch(config, entrypoint)(job.run_dir)
    except ChildFailedError as exc:
        return exc
    except RendezvousError as exc:  # a node never came, or the one hosting the store went
        raise NodeLost(
            f"{nodes.label()}: the rendezvous at {nodes.endpoint} failed "
            f"({type(exc).__name__}: {exc}){nodes.lost_hint()}"
        ) from None
    except SignalException as exc:
        # the agent forwarded the stop to the workers, which checkpoint at their step's end
        stop = RunInterrupted(f"run stopped by {exc.sigval.name}: {recovery_note(job.run_dir)}")
        stop.signal = exc.sigval
        raise stop from None
    return None


class UserErrorFilter(logging.Filter):
    """Drops torch's dump of a worker's traceback when the worker failed with a
    :class:`XirangError` (a bad setting, a plugin's hook that raised): its one line is the
    scheduler's error message, and a plugin's traceback is in the run's plugin-errors.log."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        lines = str(error or "").strip().splitlines()
        return not (lines and _is_xirang_error(lines[-1].split(":", 1)[0]))


def _is_xirang_error(dotted: str) -> bool:
    """Whether ``module.Class`` (a traceback's last line) names a XirangError subclass."""
    module, _, name = dotted.strip().rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(found, type) and issubclass(found, XirangError)


def _report_eviction(job: JobSpec, eviction: Eviction) -> None:
    log.warning("evicted device %d: %s", eviction.device, eviction.reason)
    record_event(job.run_dir, "evict", device=eviction.device, reason=eviction.reason)


def _report_restart(
    job: JobSpec,
    devices: LocalDevices,
    evicted: list[Eviction],
    placed: list[int],
    restarts: int,
) -> None:
    """One line per restart: what was evicted, where the run goes on, from which checkpoint."""
    for eviction in evicted:
        record_event(job.run_dir, "evict", device=eviction.device, reason=eviction.reason)
    following = len(devices.place(job.nproc))
    if not following:  # the next placement stops the run and says why
        return
    why = "".join(f"evicted device {e.device} ({e.reason}); " for e in evicted)
    log.warning(
        "restart %d of %d: %scontinuing on %d worker(s) (was %d), from %s",
        restarts,
        job.max_restarts,
        why,
        following,
        len(placed),
        _latest(job.run_dir),
    )


def _latest(run_dir: str) -> str:
    saves = [e["step"] for e in read_events(run_dir) if e["event"] == "save"]
    return f"checkpoint step {max(saves)}" if saves else "the start (no checkpoint yet)"


def _stopped_by_peer(exc: Any, job: JobSpec) -> RunInterrupted | None:
    """A stop that reached another node's workers: they all checkpointed at the same step (the
    stop vote is job-wide) and this node's workers stopped too, so this node stops as asked."""
    error = _failure_detail(exc).split(":", 1)[0]  # "RunInterrupted" or its dotted name
    if error.rpartition(".")[2] != RunInterrupted.__name__:
        return None
    return RunInterrupted(f"run stopped on another node: {recovery_note(job.run_dir)}")


def _root_failure(exc: Any) -> tuple[int, Any]:
    """The failed worker to report: the first whose error is not a lost peer (a worker that
    raised takes its collectives down with it, and a peer may record that first)."""
    ordered = sorted(exc.failures.items(), key=lambda item: item[1].timestamp)
    for rank, failure in ordered:
        if not peer_lost(_message(failure)):
            return rank, failure
    return exc.get_first_failure()


def _message(failure: Any) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    return str(message or "")


def _failure_detail(exc: Any) -> str:
    """The last line of the reported worker's error (its exception), or its exit code."""
    _, failure = _root_failure(exc)
    message = _message(failure).strip()
    return message.splitlines()[-1] if message else f"exit code {failure.exitcode}"


def _describe_failure(exc: Any, job: JobSpec, nproc: int, restarts: int) -> str:
    rank, _ = _root_failure(exc)
    return (
        f"worker rank {rank} of {nproc} failed after {restarts} restart(s): {_failure_detail(exc)} "
        f"(run directory {job.run_dir}; {recovery_note(job.run_dir)})"
    )
