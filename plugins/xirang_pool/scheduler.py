"""``scheduler=pool``: the run becomes a job of the shared pool.

The run is submitted with its project, logical cards, job class and priority; it waits in the
pool's queue until admitted. With the service's local executor the submitter is the executor:
once admitted, the workers run here through the local scheduler (torch's elastic launcher for
several workers) and the end is reported back. With a cluster executor (Slurm) the service
starts the workers on the nodes it chose and this process follows the job to its end,
passing the run's stragglers on (:mod:`xirang_pool.stragglers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xirang import XirangError, get_registry
from xirang.cost import charge_summary, run_usage
from xirang.launch import (
    CONFIG_FILE,
    SUMMARY_FILE,
    balance_placement,
    check_quota,
    read_config,
    stop_on,
    write_config,
)
from xirang.pool import PoolClient, PoolError
from xirang.specs import JobSpec
from xirang_pool.stragglers import StragglerRelay
from xirang_pool.watch import PoolWatch


@dataclass
class PoolSchedulerConfig:
    url: str = ""
    cards: int = 1
    priority: str = "normal"
    job_class: str = "default"
    poll_s: float = 2.0
    #: the run may wait for a cheap window and be stopped (it checkpoints) before it ends
    interruptible: bool = False
    #: when no single device type has room, the job may span types (cards converted per type)
    allow_mixing: bool = False
    #: the local executor's workers each under a CPU quota, as ``scheduler=local``'s
    #: (:func:`xirang.launch.check_quota`): a slower device made real on one machine
    worker_quota: list[float] = field(default_factory=list)

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``scheduler`` section, its quotas checked against this machine."""
        check_quota(settings.get("worker_quota") or [])
        return settings


class JobNotRun(XirangError):
    exit_code = 1


class PoolScheduler:
    def __init__(self, **settings: Any) -> None:
        self.config = PoolSchedulerConfig(**settings)
        self.client = PoolClient(self.config.url)

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        submitted = self.client.submit(
            project=job.project,
            cards=self.config.cards,
            priority=self.config.priority,
            job_class=self.config.job_class,
            allow_mixing=self.config.allow_mixing,
            name=Path(job.run_dir).name,
            payload={
                "run_dir": job.run_dir,
                "nproc": job.nproc,
                "interruptible": self.config.interruptible,
            },
        )
        job_id = submitted["id"]
        print(f"pool: job {job_id} submitted ({self.config.cards} cards, project {job.project})")
        try:
            state = self._wait(job_id, until=("running",))
            if self.client.call("GET", "/v1/status").get("executor", "local") != "local":
                self._follow(job_id, job.run_dir)
            else:
                self._run_here(job_id, job, entrypoint, state)
            self._state_the_charge(job_id, job.run_dir)
        except KeyboardInterrupt:
            self.client.cancel(job_id)
            raise

    def _run_here(
        self, job_id: int, job: JobSpec, entrypoint: Callable[[str], Any], state: dict[str, Any]
    ) -> None:
        """The local executor: the workers run in this process's care, on this machine. When
        the pool stops the job (preemption, a drained node) they checkpoint and exit; the run
        waits for its next placement and resumes from that checkpoint. A job the pool ends
        instead (cancelled, stopped by a budget) ends the run."""
        while True:
            print(f"pool: job {job_id} placed on {state['device_type']} devices {state['devices']}")
            balance_by_speed(job, state.get("device_speeds") or [])
            if self._run_placement(job_id, job, entrypoint, state):
                return self._report_done(job_id, self._usage(job, state))
            state = self.client.job(job_id)
            if state["state"] in ("done", "failed", "cancelled"):
                raise JobNotRun(
                    f"pool job {job_id} was {state['state']} by the pool; the run stopped after "
                    f"saving a checkpoint in {job.run_dir}"
                )
            state = self._wait(job_id, until=("running",))
            print(f"pool: job {job_id} placed again; resuming from its checkpoint")

    def _run_placement(
        self, job_id: int, job: JobSpec, entrypoint: Callable[[str], Any], state: dict[str, Any]
    ) -> bool:
        """The workers of one placement; False when the pool stopped them first. They start
        through ``scheduler=local`` as the registry has it: a plugin never imports another."""
        local = get_registry().create(
            "scheduler", {"name": "local", "worker_quota": self.config.worker_quota}
        )
        relay = StragglerRelay(self.client, job_id, job.run_dir, state["started"])
        watch = PoolWatch(self.client, job_id, state, self.config.poll_s, relay)
        with stop_on(), watch:
            try:
                local.launch(job, entrypoint)
                return True
            except BaseException:
                if not watch.told.is_set():
                    self.client.complete(job_id, ok=False)
                    raise
        print(f"pool: {watch.reason}; its workers checkpointed and stopped")
        return False

    @staticmethod
    def _usage(job: JobSpec, state: dict[str, Any]) -> dict[str, float]:
        """What this executor measured of the placement that just ended: when the run ended
        and its utilisation (the pool meters idle time and findings from them)."""
        return run_usage(job.run_dir, len(state["devices"]), state["started"], time.time())

    def _report_done(self, job_id: int, usage: dict[str, float] | None = None) -> None:
        """The run finished; if the pool took the job back at that very moment, withdraw it."""
        try:
            self.client.complete(job_id, ok=True, **(usage or {}))
        except PoolError as exc:
            if exc.status != 409:
                raise
            self.client.cancel(job_id)  # requeued as the run ended: nothing is left to run

    def _state_the_charge(self, job_id: int, run_dir: str) -> None:
        """The run's summary states the pool's charge for the job (one amount for one job:
        the summary's and ``xirang cost report``'s); an unmetered pool leaves the run's quote."""
        charge = self.client.charge(job_id)
        if charge is not None and Path(run_dir, SUMMARY_FILE).exists():
            charge_summary(run_dir, charge)

    def _follow(self, job_id: int, run_dir: str) -> None:
        """A cluster executor (Slurm) runs the job: wait for its end, passing the run's
        stragglers on to the pool placement by placement, as the local executor's watch does
        (the run directory is on a filesystem the submitter shares with the nodes)."""
        relays: dict[float, StragglerRelay] = {}  # by placement (when it started)

        def pass_on(state: dict[str, Any]) -> None:
            if state["state"] == "running":
                started = state["started"]
                if started not in relays:
                    relays[started] = StragglerRelay(self.client, job_id, run_dir, started)
                relays[started].poll()

        final = self._wait(job_id, until=("done", "failed", "cancelled"), each=pass_on)
        if final["state"] != "done":
            raise JobNotRun(f"pool job {job_id} ended {final['state']}")

    def _wait(
        self,
        job_id: int,
        until: tuple[str, ...],
        each: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """The job's state once it is one of ``until``; ``each`` sees every state before."""
        while True:
            state = self.client.job(job_id)
            if state["state"] in until:
                return state
            if state["state"] in ("done", "failed", "cancelled"):
                raise JobNotRun(f"pool job {job_id} ended {state['state']} while waiting to run")
            if each is not None:
                each(state)
            time.sleep(self.config.poll_s)


def rank_speeds(speeds: list[float], ranks: int) -> list[float] | None:
    """Each rank's speed when a placement's devices are dealt to ``ranks`` workers in order,
    the same number each (a rank's devices' speeds summed); None when they do not divide."""
    if not speeds or len(speeds) % ranks:
        return None
    each = len(speeds) // ranks
    return [sum(speeds[r * each : (r + 1) * each]) for r in range(ranks)]


def balance_by_speed(job: JobSpec, speeds: list[float]) -> None:
    """A placement over several device types (``pool.allow_mixing=true``): the run's ranks get
    first shares by their devices' speeds (written into its config before the workers start,
    so it trains balanced from the first step); one line says what was set."""
    if not speeds and not Path(job.run_dir, CONFIG_FILE).is_file():
        return  # one device type, and a run that holds no config to undo
    config = read_config(job.run_dir)
    if not speeds and "balance_placed" not in config.get("runtime", {}):
        return  # one device type, as every placement of this run so far
    ranks = rank_speeds(speeds, job.nproc) if speeds else []
    if ranks is None:
        print(
            f"pool: {len(speeds)} devices do not divide over {job.nproc} workers: "
            "the ranks keep even shares"
        )
        ranks = []
    config, said = balance_placement(config, ranks)
    write_config(config, job.run_dir)
    if speeds:
        print(f"pool: mixed placement, rank speeds {[round(v, 3) for v in ranks]}: {said}")
