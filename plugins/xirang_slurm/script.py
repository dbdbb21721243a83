"""The sbatch script for one placed job: workers started by srun, torchrun per node.

The placement becomes ``--nodelist`` (the nodes the pool chose) and ``--switches`` (at most as
many leaf switches as the placement spans, so Slurm keeps the job as close as the pool did).
``--signal=B:TERM@<grace>`` tells the job before its time is up; on preemption the pool sends
TERM through ``scancel --signal`` first, so workers checkpoint before they stop.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchJob:
    name: str
    command: Sequence[str]
    nodes: Sequence[str] = ()
    node_count: int = 1
    procs_per_node: int = 1
    switches: int = 0
    partition: str = ""
    time_limit: str = ""
    output: str = ""
    torchrun: bool = True
    grace_s: int = 60


def render(job: BatchJob) -> str:
    """The batch script text."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job.name}"]
    count = len(job.nodes) or job.node_count
    lines.append(f"#SBATCH --nodes={count}")
    lines.append("#SBATCH --ntasks-per-node=1")
    lines.append(f"#SBATCH --cpus-per-task={max(1, job.procs_per_node)}")
    if job.nodes:
        lines.append(f"#SBATCH --nodelist={','.join(job.nodes)}")
    if job.switches:
        lines.append(f"#SBATCH --switches={job.switches}")
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    if job.time_limit:
        lines.append(f"#SBATCH --time={job.time_limit}")
    if job.output:
        lines.append(f"#SBATCH --output={job.output}")
    lines.append(f"#SBATCH --signal=B:TERM@{job.grace_s}")
    lines += ["set -euo pipefail", _launch(job)]
    return "\n".join(lines) + "\n"


def _launch(job: BatchJob) -> str:
    command = " ".join(shlex.quote(c) for c in job.command)
    if not job.torchrun:
        return f"srun {command}"
    head = 'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    torchrun = (
        "python -m torch.distributed.run --nnodes=$SLURM_NNODES "
        f"--nproc_per_node={job.procs_per_node} --rdzv_backend=c10d "
        "--rdzv_endpoint=$HEAD:29500 --rdzv_id=$SLURM_JOB_ID --no-python "
    )
    return f"{head}\nsrun {torchrun}{command}"
