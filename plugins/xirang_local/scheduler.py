"""Run a job on this machine.

One worker runs in the calling process, so a progress bar and a debugger work as usual. Several
workers run under torch's elastic agent with a private rendezvous on loopback; every worker gets
the run directory that the caller created, so one run has one directory.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from xirang_core.errors import XirangError
from xirang_core.specs import JobSpec


class WorkerFailed(XirangError):
    exit_code = 1


class LocalScheduler:
    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        if job.nproc == 1 and job.max_restarts == 0:
            entrypoint(job.run_dir)
            return
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch

        logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=job.nproc,
            run_id=f"xirang-{uuid.uuid4().hex[:8]}",
            rdzv_backend="c10d",
            rdzv_endpoint="127.0.0.1:0",
            max_restarts=job.max_restarts,
            monitor_interval=0.1,
            start_method="spawn",
        )
        try:
            elastic_launch(config, entrypoint)(job.run_dir)
        except ChildFailedError as exc:
            raise WorkerFailed(_describe_failure(exc, job)) from None


def _describe_failure(exc: Any, job: JobSpec) -> str:
    rank, failure = exc.get_first_failure()
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", message)
    detail = str(message).strip().splitlines()[-1] if message else f"exit code {failure.exitcode}"
    from xirang_core.checkpoint.events import recovery_note

    return (
        f"worker rank {rank} of {job.nproc} failed after {job.max_restarts} restart(s): {detail} "
        f"(run directory {job.run_dir}; {recovery_note(job.run_dir)})"
    )
