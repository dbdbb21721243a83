"""``scheduler=slurm``: submit the run's workers to Slurm and wait for them to finish.

``scheduler.nodes`` nodes with ``trainer.nproc`` workers each; the run's batch arithmetic
counts all of them (xirang_core.config). The runtime is resolved on the job's first node
(``resolves_runtime``), so the submitting host needs no device of the run's type.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xirang import ConfigError
from xirang.specs import JobSpec, SchedulerBase
from xirang_slurm import commands
from xirang_slurm.executor import TERMINAL
from xirang_slurm.script import BatchJob, render

#: how long a failed job's state must stay failed before it counts as the end (not a requeue)
REQUEUE_WINDOW_S = 3.0


@dataclass
class SlurmConfig:
    partition: str = ""
    nodes: int = 1
    nodelist: str = ""
    switches: int = 0
    time_limit: str = ""
    gres: str = ""
    signal_grace_s: int = 60


class SlurmScheduler(SchedulerBase):
    #: device, collective backend and calibration are resolved on the nodes (xirang_slurm.task)
    resolves_runtime = True

    def __init__(self, **settings: Any) -> None:
        self.config = SlurmConfig(**settings)
        named = [n for n in self.config.nodelist.split(",") if n]
        if named and len(named) != self.config.nodes:
            raise ConfigError(
                f"scheduler.nodelist={self.config.nodelist} names {len(named)} node(s) but "
                f"scheduler.nodes={self.config.nodes}; set scheduler.nodes={len(named)}"
            )

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        """sbatch, then wait until the job ends (a requeued job, stopped on a signal or on a
        lost node, is waited for again); the workers run ``xirang_slurm.task``."""
        script = Path(job.run_dir) / "job.sbatch"
        script.write_text(render(self.batch_job(job)))
        slurm_id = commands.run("sbatch", "--parsable", str(script)).strip().split(";")[0]
        try:
            state, code = wait_for(slurm_id)
        except BaseException:  # Ctrl-C or a stop of this process: the job goes with it
            commands.cancel(slurm_id)  # TERM (a checkpoint if there is time), then KILL
            raise
        if state != "COMPLETED" or code != 0:
            why = _error_lines(Path(job.run_dir)) or f"job {slurm_id} ended {state}, exit {code}"
            raise commands.SlurmError(f"{why} (script {script}, output in {job.run_dir})")

    def batch_job(self, job: JobSpec) -> BatchJob:
        config = yaml.safe_load((Path(job.run_dir) / "config.yaml").read_text())
        return BatchJob(
            name=f"xirang-{Path(job.run_dir).name}",
            run_dir=job.run_dir,
            nodes=[n for n in self.config.nodelist.split(",") if n],
            node_count=self.config.nodes,
            procs_per_node=job.nproc,
            threads_per_proc=config["trainer"].get("threads") or 1,
            device=config["device"]["name"],
            gres=self.config.gres,
            switches=self.config.switches,
            partition=self.config.partition,
            time_limit=self.config.time_limit,
            output=str(Path(job.run_dir) / "slurm-%j.out"),
            grace_s=self.config.signal_grace_s,
            max_restarts=job.max_restarts,
        )


def wait_for(slurm_id: str, poll_s: float = 0.5) -> tuple[str, int]:
    """The job's final state and exit code. A failed state that turns back to pending is a
    requeue (``--requeue`` after a lost node), so an ending must hold for a few polls."""
    ended = 0
    while True:
        state, code = commands.job_state(slurm_id)
        state = state.split()[0]
        ended = ended + 1 if state in TERMINAL else 0
        if ended and (state == "COMPLETED" or ended * poll_s >= REQUEUE_WINDOW_S):
            return state, code
        time.sleep(poll_s)


def _error_lines(run_dir: Path) -> str:
    """The job's own ``xirang error:`` lines (a config the nodes refused), without repeats."""
    lines: list[str] = []
    for out in sorted(run_dir.glob("slurm-*.out")):
        for line in out.read_text(errors="replace").splitlines():
            match = re.search(r"xirang error: (.*)", line)
            if match and match[1] not in lines:
                lines.append(match[1])
    return "; ".join(lines)
