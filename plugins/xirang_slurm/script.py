"""The sbatch script for one job: its nodes, the devices each node gives it, and its workers.

The placement becomes ``--nodelist`` (the nodes the pool chose) and ``--switches`` (at most as
many leaf switches as the placement spans, so Slurm keeps the job as close as the pool did).
Each node is asked for the devices its workers need: ``--gpus-per-node`` for CUDA and ROCm,
``--gres=npu:N`` for Ascend (or the ``gres`` given), and CPUs for every worker's threads.

A xirang run's workers are srun tasks (``xirang_slurm.task``), one per device, which resolve
the runtime on their nodes; the batch script picks a free rendezvous port on the first node.
``--signal=TERM@grace`` has Slurm send the workers TERM that long before the time limit,
which they answer with a
checkpoint at the step's end; the script then requeues the job (``--requeue``) and the requeued
job resumes from that checkpoint. A failed step (a node lost) is requeued too while
``max_restarts`` allows, counted by Slurm's ``SLURM_RESTART_COUNT``.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from xirang_slurm.task import STOP_FILE

#: the accelerators Slurm hands out per node, by xirang device type: (flag, gres name)
GPU_TYPES = {"cuda": "gpus", "rocm": "gpus", "ascend": "npu"}
FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


@dataclass(frozen=True)
class BatchJob:
    name: str
    #: a plain command (srun runs it on every node), used when ``run_dir`` is empty
    command: Sequence[str] = ()
    #: a xirang run directory: its workers are srun tasks of ``xirang_slurm.task``
    run_dir: str = ""
    nodes: Sequence[str] = ()
    node_count: int = 1
    procs_per_node: int = 1
    threads_per_proc: int = 1
    device: str = "cpu"
    gres: str = ""
    switches: int = 0
    partition: str = ""
    #: the Slurm account the job is charged to (its project's, whose limits bound it)
    account: str = ""
    time_limit: str = ""
    output: str = ""
    grace_s: int = 60
    #: requeue a run stopped on a signal (and a failed one while restarts remain); the pool's
    #: executor requeues its jobs itself and says False
    requeue: bool = True
    max_restarts: int = 0


def render(job: BatchJob) -> str:
    """The batch script text."""
    count = len(job.nodes) or job.node_count
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={count}",
        *[f"#SBATCH {flag}" for flag in resource_flags(job)],
        *[f"#SBATCH {flag}" for flag in placement_flags(job)],
        f"#SBATCH --signal=TERM@{job.grace_s}",
    ]
    if job.output:
        lines += [f"#SBATCH --output={job.output}", "#SBATCH --open-mode=append"]
    if job.requeue and job.run_dir:
        lines.append("#SBATCH --requeue")
    lines += ["set -uo pipefail", *(_run(job) if job.run_dir else [_plain(job)])]
    return "\n".join(lines) + "\n"


def resource_flags(job: BatchJob) -> list[str]:
    """What each node gives the job: tasks, their CPUs, and its accelerators."""
    per_node = max(1, job.procs_per_node)
    tasks = per_node if job.run_dir else 1  # a plain command runs once per node
    flags = [
        f"--ntasks-per-node={tasks}",
        f"--cpus-per-task={max(1, job.threads_per_proc) * (per_node // tasks)}",
    ]
    if job.gres:
        flags.append(f"--gres={job.gres}")
    elif GPU_TYPES.get(job.device) == "gpus":
        flags.append(f"--gpus-per-node={per_node}")
    elif job.device in GPU_TYPES:
        flags.append(f"--gres={GPU_TYPES[job.device]}:{per_node}")
    return flags


def placement_flags(job: BatchJob) -> list[str]:
    flags = []
    if job.nodes:
        flags.append(f"--nodelist={','.join(job.nodes)}")
    if job.switches:
        flags.append(f"--switches={job.switches}")
    if job.partition:
        flags.append(f"--partition={job.partition}")
    if job.account:
        flags.append(f"--account={job.account}")
    if job.time_limit:
        flags.append(f"--time={job.time_limit}")
    return flags


def _plain(job: BatchJob) -> str:
    """srun the command; ``--`` first, so a command that starts with a dash (``--uid=0``)
    is the program to run, never an option of srun's."""
    return "srun -- " + shlex.join(job.command)


def _run(job: BatchJob) -> list[str]:
    """Resolve on the first node, start the workers, then requeue or end."""
    python, run_dir = shlex.quote(sys.executable), shlex.quote(job.run_dir)
    stop = shlex.quote(f"{job.run_dir}/{STOP_FILE}")
    return [
        f"rm -f {stop}",
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f'export MASTER_PORT="$({python} -c {shlex.quote(FREE_PORT)})"',
        f"srun --kill-on-bad-exit=1 {python} -m xirang_slurm.task {run_dir}",
        "rc=$?",
        *_requeue(job, stop),
        "exit $rc",
    ]


def _requeue(job: BatchJob, stop: str) -> list[str]:
    if not job.requeue:
        return []
    again = 'echo "xirang: requeueing job $SLURM_JOB_ID ({}); it resumes from its checkpoint"'
    return [
        f"if [ -e {stop} ]; then",
        f"    {again.format('stopped on a signal')}",
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        f'elif [ "$rc" -ne 0 ] && [ "${{SLURM_RESTART_COUNT:-0}}" -lt {job.max_restarts} ]; then',
        f"    {again.format('a worker failed')}",
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
    ]
