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
be submitted under (``xirang-<store>-<job>-<random>``, :meth:`SlurmExecutor.intent`; the
store's id keeps two pools' job 1 apart). A job whose id the pool does not have (it died
between sbatch and storing the id, or sbatch got no answer from a stalled slurmctld) is found
by that name at the next poll that Slurm answers and tracked; a name Slurm has no job under is
``failed``, but a lost answer only after :attr:`SlurmExecutor.grace` (the stalled controller may
still make the job when it wakes). Every poll is one ``scontrol show job`` listing; in it, a
live job of this store's that is not the one tracked for its pool job (an earlier start, a
submission given up, one whose cancel went unanswered) is cancelled: no Slurm job runs that the
pool does not know of, and no pool job runs twice.

Every Slurm command has a short timeout (:data:`xirang_slurm.commands.TIMEOUT`); the service
calls this executor outside its lock, from one thread (``remote = True``), so a stalled
controller delays Slurm's side of the pool, never its answers.

Each job runs as its project's account (``run_as``): the service, as root, submits it with
``runuser -u ACCOUNT -- sbatch`` and a clean environment (none of the service's variables, its
tokens and database URL among them, reach the job), from the account's home (a run from its run
directory), where Slurm writes its output, ``xirang-pool-<job>.out``.

Where slurmctld enforces association limits (slurmdbd, ``AccountingStorageEnforce=limits``),
the service tells the executor each project's cards (:meth:`SlurmExecutor.limit`, at start and
at every quota change) and it keeps the project's Slurm account, user and ``GrpTRES``
(:mod:`xirang_slurm.limits`), so a tenant's own ``sbatch`` pends behind the same quota; the
pool's jobs are submitted under that account (``--account``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xirang import xirang_home
from xirang_slurm import commands, limits
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
    #: every call may wait on slurmctld: the service makes them from its actor thread
    remote = True
    #: seconds a submission whose answer was lost may take to appear in Slurm before a
    #: lookup that does not find it reports it failed (a stalled slurmctld reads the request
    #: when it wakes, after the sbatch gave up)
    grace = 30.0
    #: seconds before a project limit sacctmgr could not set (slurmdbd away) is tried again
    retry_limits = 30.0

    def __init__(self, workdir: str | Path | None = None, partition: str = "") -> None:
        self.workdir = Path(workdir or xirang_home() / "slurm")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.partition = partition
        self.store_id = ""  # the pool store's, in every job name and output file (bind)
        self.slurm_ids: dict[int, str] = {}
        self.ended_at: dict[int, float] = {}
        self.lost: set[int] = set()  # running in the pool's store, with no Slurm job id
        self.names: dict[int, str] = {}  # intents: the name the next start submits under
        self.unresolved: dict[int, str] = {}  # intents not yet found in Slurm
        self.asked: dict[int, float] = {}  # unresolved submissions: when sbatch got no answer
        self.unanswered: set[int] = set()  # tracked jobs the last poll could not learn of
        self.cluster: str | None = None  # Slurm's ClusterName, once slurmctld said
        self.enforcing = False  # whether slurmctld holds jobs to association limits
        self.limits: dict[str, tuple[str, str]] = {}  # project: (user, GrpTRES) not yet set
        self.limits_tried = 0.0
        self.holders: dict[str, str] = {}  # Slurm account: the project it is kept for

    def bind(self, store_id: str) -> None:
        """The pool store's id, put in every Slurm job's name and output file: a pool finds
        and cancels only its own store's jobs, and two stores' job 1 never share a file."""
        self.store_id = store_id

    def intent(self, job: Any) -> str:
        """The unique Slurm job name ``job``'s next start will be submitted under; the service
        stores it before :meth:`start`, so a restart finds the job even without its id."""
        self.names[job.id] = name = f"{self._prefix}{job.id}-{secrets.token_hex(4)}"
        return name

    @property
    def _prefix(self) -> str:
        return f"{INTENT}{self.store_id}-" if self.store_id else INTENT

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

    def fates(self) -> dict[int, str]:
        """What the pool cannot know of its running jobs now: ``submitting`` for one whose
        submission Slurm has not confirmed, ``unknown`` for one Slurm did not answer about."""
        fates = dict.fromkeys(self.unanswered, "unknown")
        return fates | dict.fromkeys(self.unresolved, "submitting")

    def start(self, job: Any, nodes: list[str], leaves: int = 1, account: str = "") -> str:
        """sbatch the job on ``nodes`` (as ``account`` when given); returns Slurm's job id, or,
        when sbatch got no answer (the job may or may not exist), the job's name, by which
        the next polls find it (:meth:`_resolve`): never failed while Slurm may still run it."""
        payload = job.payload or {}
        run_dir = "" if "command" in payload else str(payload.get("run_dir", "."))
        per_node = workers_per_node(payload, len(job.devices), len(nodes))
        name = self.names.pop(job.id, f"{self._prefix}{job.id}")
        batch = BatchJob(
            name=name,
            command=payload.get("command") or (),
            run_dir=run_dir,
            nodes=nodes,
            procs_per_node=per_node,
            device=job.device_type or "cpu",
            switches=leaves,
            partition=self.partition,
            output=self._output(job.id, account),
            account=limits.slurm_account(job.project) if self.enforcing and account else "",
            requeue=False,  # the pool requeues a preempted job itself
        )
        script = self.workdir / f"job-{job.id}.sbatch"
        script.write_text(render(batch))
        try:
            answer = _sbatch(script.read_text(), account, run_dir)
        except commands.SlurmTimeout as exc:
            log.warning(
                "pool: job %d's sbatch got no answer (%s); looking for %s", job.id, exc, name
            )
            self.unresolved[job.id], self.asked[job.id] = name, time.monotonic()
            return name
        self.slurm_ids[job.id] = slurm_id = answer.strip().split(";")[0]
        return slurm_id

    def _output(self, job_id: int, account: str) -> str:
        """Where Slurm writes the job's output: the executor's folder, or, for a job run as an
        account (which cannot enter the service's folders), its working directory. The store's
        id is in the name: job ids start again at 1 in every pool store."""
        stem = f"{self.store_id}-{job_id}" if self.store_id else str(job_id)
        return f"xirang-pool-{stem}.out" if account else str(self.workdir / f"job-{stem}.out")

    def stop(self, job: Any, reason: str) -> None:
        """Tell a running job (TERM: checkpoint now), then cancel it; a pending one is just
        cancelled (slurmctld refuses to signal a job that has not started, and scancel would
        retry until it gave up). It is no longer tracked; a cancel Slurm did not answer is
        repeated by the next polls, which cancel every live job of this store they do not
        track. One whose submission is unconfirmed is cancelled by its name."""
        self.asked.pop(job.id, None)
        self.unanswered.discard(job.id)
        name = self.unresolved.pop(job.id, None)
        if name is not None:
            with contextlib.suppress(commands.SlurmError):
                commands.run("scancel", f"--name={name}")
        slurm_id = self.slurm_ids.pop(job.id, None)
        if slurm_id is None:
            return
        commands.cancel(slurm_id, "--signal=TERM", "--full", "--state=RUNNING")
        commands.cancel(slurm_id)  # a pending one, and a running one after its TERM

    def limit(self, project: str, account: str, cards: int | None, types: Sequence[str]) -> None:
        """Keep ``project``'s Slurm association (:mod:`xirang_slurm.limits`): its account,
        ``account`` (its ``run_as``) as the one user, ``GrpTRES`` at ``cards`` of each of
        ``types`` (None: no limit). Nothing where slurmctld enforces no limits (said once); a
        change sacctmgr could not make (slurmdbd away) is logged and made at a later poll."""
        holder = self.holders.setdefault(limits.slurm_account(project), project)
        if holder != project:
            log.error(
                "pool: project %s's Slurm account %s is project %s's already (Slurm account "
                "names are lower case): its limit is not set; rename one of them",
                project,
                holder.lower(),
                holder,
            )
            return
        self.limits[project] = (account, limits.tres(types, cards))
        self._keep_limits()

    def _keep_limits(self) -> None:
        """Set the limits not set yet; each one sacctmgr refuses stays for a later try."""
        self.limits_tried = time.monotonic()
        if not self._learn_accounting():
            return
        for project, (user, grp_tres) in list(self.limits.items()):
            if self.enforcing:
                try:
                    limits.keep(self.cluster or "", project, user, grp_tres)
                except commands.SlurmError as exc:
                    log.warning(
                        "pool: project %s's Slurm limit (GrpTRES=%s) is not set: %s; trying "
                        "again in %.0f s",
                        project,
                        grp_tres,
                        exc,
                        self.retry_limits,
                    )
                    continue
                log.info(
                    "pool: project %s: Slurm account GrpTRES=%s, user %s",
                    project,
                    grp_tres,
                    user or "none",
                )
            del self.limits[project]

    def _learn_accounting(self) -> bool:
        """Learn, once, the cluster's name and whether it enforces association limits (a
        warning if not); False while slurmctld does not answer."""
        if self.cluster is not None:
            return True
        try:
            conf = limits.config()
        except commands.SlurmError as exc:
            log.warning("pool: cannot read Slurm's configuration: %s; trying again later", exc)
            return False
        self.cluster, self.enforcing = conf.get("ClusterName", ""), limits.enforced(conf)
        if not self.enforcing:
            log.warning(
                "pool: Slurm does not enforce association limits (AccountingStorageEnforce=%s):"
                " a tenant's own sbatch is bounded by nothing the pool sets (docs/pool.md, "
                "Slurm accounting)",
                conf.get("AccountingStorageEnforce", "none"),
            )
        return True

    def poll(self) -> list[tuple[int, bool]]:
        """Jobs that ended since the last poll and whether they succeeded, from one listing of
        Slurm's jobs: a job Slurm no longer knows has vanished (failed). The same listing finds
        unconfirmed submissions by name and cancels strays (see :meth:`_sweep`). Slurm not
        answering is retried at the next poll; meanwhile the jobs' fate is ``unknown``. A
        project limit not set yet is tried again once :attr:`retry_limits` has passed."""
        if self.limits and time.monotonic() - self.limits_tried >= self.retry_limits:
            self._keep_limits()
        if self.slurm_ids or self.unresolved or self.store_id:
            try:
                listing = commands.jobs()
            except commands.SlurmError as exc:
                log.warning("pool: cannot list Slurm's jobs: %s; asking at the next poll", exc)
                self.unanswered = set(self.slurm_ids)
                return self._lost()
            self.unanswered.clear()
            self._resolve(listing)
            ended = self._lost() + self._ended(listing)
            self._sweep(listing)
            return ended
        return self._lost()

    def _lost(self) -> list[tuple[int, bool]]:
        """The jobs found to have no Slurm job, each reported failed once."""
        lost, self.lost = sorted(self.lost), set()
        return [(job_id, False) for job_id in lost]

    def _ended(self, listing: Mapping[str, Mapping[str, str]]) -> list[tuple[int, bool]]:
        """The tracked jobs the listing shows ended (or no longer has), no longer tracked."""
        ended = []
        for job_id, slurm_id in list(self.slurm_ids.items()):
            record = listing.get(slurm_id, {})
            state = record.get("JobState", "UNKNOWN")
            if state.split()[0] in TERMINAL:
                code = record.get("ExitCode", "-1:0").split(":")[0]
                ended.append((job_id, state.startswith("COMPLETED") and code == "0"))
                if (end := commands.ended_at(record)) is not None:
                    self.ended_at[job_id] = end
                del self.slurm_ids[job_id]
        return ended

    def _resolve(self, listing: Mapping[str, Mapping[str, str]]) -> None:
        """Find each unconfirmed submission's Slurm job by its name: the newest is tracked,
        older ones (an earlier submission under the same name) cancelled. A name Slurm has no
        job under is lost, but only once the grace since its lost answer has passed."""
        for job_id, name in list(self.unresolved.items()):
            found = sorted(
                (i for i, r in listing.items() if r.get("JobName") == name), key=_numeric
            )
            if not found and time.monotonic() - self.asked.get(job_id, 0.0) < self.grace:
                continue
            del self.unresolved[job_id]
            self.asked.pop(job_id, None)
            if not found:
                self.lost.add(job_id)
                continue
            *older, self.slurm_ids[job_id] = found
            for slurm_id in older:
                commands.cancel(slurm_id)
            log.info("pool: job %d found by its name %s: Slurm job %s", job_id, name, found[-1])

    def _sweep(self, listing: Mapping[str, Mapping[str, str]]) -> None:
        """Cancel every live Slurm job of this store that is not the one tracked for its pool
        job: a submission that surfaced after it was given up, an earlier start of a requeued
        job, one whose cancel Slurm did not answer. One pool job never runs twice."""
        if not self.store_id:
            return
        for slurm_id, record in listing.items():
            job_id = self._job_of(record.get("JobName", ""))
            state = record.get("JobState", "UNKNOWN").split()[0]
            if job_id is None or state in TERMINAL or self.slurm_ids.get(job_id) == slurm_id:
                continue
            log.warning("pool: Slurm job %s (pool job %d) is a stray; cancelling", slurm_id, job_id)
            commands.cancel(slurm_id)

    def _job_of(self, name: str) -> int | None:
        """The pool job a Slurm job name of this store's belongs to; None for another's."""
        job, dash, _ = name.removeprefix(self._prefix).partition("-")
        return int(job) if name.startswith(self._prefix) and dash and job.isdigit() else None

    def usage(self, job_id: int) -> dict[str, float]:
        """What Slurm measured of an ended job: when it ended (the pool releases the devices
        when it polls; any later is idle time metering shows)."""
        ended = self.ended_at.pop(job_id, None)
        return {"run_ended_at": ended} if ended is not None else {}

    def drain(self, node: str, reason: str) -> None:
        commands.drain(node, reason)


def _numeric(slurm_id: str) -> int:
    return int(slurm_id) if slurm_id.isdigit() else 0


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
