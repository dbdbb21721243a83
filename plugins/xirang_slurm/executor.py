"""The pool's Slurm executor: each placed job becomes one sbatch job on the chosen nodes.

``xirang pool serve --executor slurm`` uses it. A job's ``payload`` either names a xirang run
directory (``run_dir``: one srun task per worker, ``xirang_slurm.task``; its ``nproc`` workers
spread over the nodes) or a plain ``command`` list run by srun once per node. A job over
several nodes gets them as ``--nodelist`` and the leaf switches its placement spans as
``--switches``. Preemption sends TERM first (the workers
checkpoint at their step's end), then cancels; the pool requeues the job, which resumes from
that checkpoint in its run directory.

The Slurm job ids are the pool's handles: the service stores each one as soon as sbatch
answers, and a restarted pool hands them back (:meth:`SlurmExecutor.adopt`), so the jobs that
ran on meanwhile are polled again: one Slurm finished is ``done``, one that failed or that
Slurm no longer knows (or whose id was never stored) is ``failed``.

Before sbatch, the service stores the job's *intent*: the unique Slurm job name it is about to
be submitted under (``xirang-<job>-<random>``, :meth:`SlurmExecutor.intent`). A pool that died
between sbatch and storing the id finds the job by that name (``squeue --name``) after its
restart and tracks it, cancelling any older submission of the same name: no Slurm job runs
that the pool does not know of. Only a name Slurm has no job under is reported ``failed``.

Each job runs as its project's account (``run_as``): the service, as root, submits it with
``runuser -u ACCOUNT -- sbatch`` and a clean environment (none of the service's variables, its
tokens and database URL among them, reach the job), from the account's home (a run from its run
directory), where Slurm writes its output, ``xirang-pool-<job>.out``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xirang import xirang_home
from xirang_slurm import commands
from xirang_slurm.script import BatchJob, render

log = logging.getLogger("xirang.pool")
#: how an intent (a job name stored before sbatch) starts; Slurm's own ids are digits
INTENT = "xirang-"
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
    "UNKNOWN",
}


def workers_per_node(payload: dict[str, Any], devices: int, nodes: int) -> int:
    """A run's workers are its ``trainer.nproc`` (``payload["nproc"]``), the count its
    config's batch arithmetic divided the global batch over, spread over the placed nodes;
    one per device otherwise (a plain command, or a submission that did not say)."""
    workers = int(payload.get("nproc") or devices)
    return max(1, workers // max(1, nodes))


class SlurmExecutor:
    name = "slurm"
    #: jobs run as their project's account: the service gives one to every start
    accounts = True

    def __init__(self, workdir: str | Path | None = None, partition: str = "") -> None:
        self.workdir = Path(workdir or xirang_home() / "slurm")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.partition = partition
        self.slurm_ids: dict[int, str] = {}
        self.ended_at: dict[int, float] = {}
        self.lost: set[int] = set()  # running in the pool's store, with no Slurm job id
        self.names: dict[int, str] = {}  # intents: the name the next start submits under
        self.unresolved: dict[int, str] = {}  # adopted intents not yet found in Slurm

    def intent(self, job: Any) -> str:
        """The unique Slurm job name ``job``'s next start will be submitted under; the service
        stores it before :meth:`start`, so a restart finds the job even without its id."""
        self.names[job.id] = name = f"{INTENT}{job.id}-{secrets.token_hex(4)}"
        return name

    def adopt(self, handles: Mapping[int, str | None]) -> None:
        """Track the running jobs a restarted pool stored, by their Slurm ids, or by the name
        of an intent whose id was never stored (found at the next poll); one with neither is
        reported failed at the next poll (nothing to poll, its devices are freed)."""
        for job_id, handle in handles.items():
            if handle and handle.startswith(INTENT):
                self.unresolved[job_id] = handle
            elif handle:
                self.slurm_ids[job_id] = handle
            else:
                self.lost.add(job_id)

    def _resolve(self) -> None:
        """Find each adopted intent's Slurm job by name: the newest is tracked, older ones
        (an earlier submission under the same name) cancelled; a name Slurm has no job under
        is lost. Slurm not answering is retried at the next poll."""
        for job_id, name in list(self.unresolved.items()):
            try:
                found = _jobs_named(name)
            except commands.SlurmError as exc:
                log.warning("pool: cannot look up Slurm job %s (job %d): %s", name, job_id, exc)
                continue
            del self.unresolved[job_id]
            if not found:
                self.lost.add(job_id)
                continue
            *older, self.slurm_ids[job_id] = found
            for slurm_id in older:
                commands.cancel(slurm_id)
            log.info("pool: job %d adopted by its name %s: Slurm job %s", job_id, name, found[-1])

    def start(self, job: Any, nodes: list[str], leaves: int = 1, account: str = "") -> str:
        """sbatch the job on ``nodes`` (as ``account`` when given); returns Slurm's job id."""
        payload = job.payload or {}
        run_dir = "" if "command" in payload else str(payload.get("run_dir", "."))
        per_node = workers_per_node(payload, len(job.devices), len(nodes))
        batch = BatchJob(
            name=self.names.pop(job.id, f"{INTENT}{job.id}"),
            command=payload.get("command") or (),
            run_dir=run_dir,
            nodes=nodes,
            procs_per_node=per_node,
            device=job.device_type or "cpu",
            switches=leaves,
            partition=self.partition,
            output=self._output(job.id, account),
            requeue=False,  # the pool requeues a preempted job itself
        )
        script = self.workdir / f"job-{job.id}.sbatch"
        script.write_text(render(batch))
        slurm_id = _sbatch(script.read_text(), account, run_dir).strip().split(";")[0]
        self.slurm_ids[job.id] = slurm_id
        return slurm_id

    def _output(self, job_id: int, account: str) -> str:
        """Where Slurm writes the job's output: the executor's folder, or, for a job run as an
        account (which cannot enter the service's folders), its working directory."""
        return f"xirang-pool-{job_id}.out" if account else str(self.workdir / f"job-{job_id}.out")

    def stop(self, job: Any, reason: str) -> None:
        """Tell the job (TERM: checkpoint now), then cancel it; it is no longer tracked. One
        adopted by a name not yet looked up is cancelled by that name."""
        name = self.unresolved.pop(job.id, None)
        if name is not None:
            with contextlib.suppress(commands.SlurmError):
                commands.run("scancel", f"--name={name}")
        slurm_id = self.slurm_ids.pop(job.id, None)
        if slurm_id is None:
            return
        commands.cancel(slurm_id, "--signal=TERM", "--full")  # it may have ended meanwhile
        commands.cancel(slurm_id)

    def poll(self) -> list[tuple[int, bool]]:
        """Jobs that ended since the last poll and whether they succeeded; a job Slurm no
        longer knows has vanished (failed). Slurm not answering is retried at the next poll."""
        self._resolve()
        ended = [(job_id, False) for job_id in sorted(self.lost)]
        self.lost.clear()
        for job_id, slurm_id in list(self.slurm_ids.items()):
            try:
                state, code = commands.job_state(slurm_id)
            except commands.SlurmError as exc:
                log.warning("pool: cannot poll Slurm job %s (job %d): %s", slurm_id, job_id, exc)
                continue
            if state.split()[0] in TERMINAL:
                ended.append((job_id, state.startswith("COMPLETED") and code == 0))
                self._note_end(job_id, slurm_id)
                del self.slurm_ids[job_id]
        return ended

    def usage(self, job_id: int) -> dict[str, float]:
        """What Slurm measured of an ended job: when it ended (the pool releases the devices
        when it polls; any later is idle time metering shows)."""
        ended = self.ended_at.pop(job_id, None)
        return {"run_ended_at": ended} if ended is not None else {}

    def _note_end(self, job_id: int, slurm_id: str) -> None:
        try:
            ended = commands.end_time(slurm_id)
        except commands.SlurmError:
            return
        if ended is not None:
            self.ended_at[job_id] = ended

    def drain(self, node: str, reason: str) -> None:
        commands.drain(node, reason)


def _jobs_named(name: str) -> list[str]:
    """The ids of the Slurm jobs named ``name`` (any user, any state Slurm still holds),
    oldest first."""
    out = commands.run("squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i")
    return sorted(out.split(), key=lambda slurm_id: int(slurm_id) if slurm_id.isdigit() else 0)


def _sbatch(script: str, account: str, run_dir: str) -> str:
    """``sbatch`` the script (on stdin), as ``account`` with a clean environment from its
    home (a run: from its run directory), else as this process."""
    if not account:
        return commands.run("sbatch", "--parsable", input_text=script)
    user = pwd.getpwnam(account)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": user.pw_dir,
        "USER": account,
        "LOGNAME": account,
        **{k: v for k, v in os.environ.items() if k == "SLURM_CONF"},
    }
    chdir = f"--chdir={run_dir if run_dir and run_dir != '.' else user.pw_dir}"
    command = ("runuser", "-u", account, "--", "sbatch", "--parsable", chdir)
    return commands.run(*command, input_text=script, env=env)
