"""torchrun's multi-node form for the local launcher: the same command on N hosts is one job.

Every node runs ``python -m xirang ... trainer.nnodes=N trainer.node_rank=R
trainer.rdzv_endpoint=HOST:PORT hydra.run.dir=DIR``; node 0 hosts the c10d rendezvous store at
``HOST:PORT`` and the others join it, as torchrun's ``--nnodes --node-rank --rdzv-endpoint``
do. The nodes share one run directory on a filesystem they all mount (``DIR``, the same path
everywhere): the config, checkpoints, metrics and summary of the job live there once. That is
why the directory must be named (a timestamped folder would differ between hosts), and why a
node whose directory lacks the job's summary at the end says the directory is not shared.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang import ConfigError, XirangError
from xirang.launch import report, resume
from xirang.specs import JobSpec


class NodeLost(XirangError):
    """Another node of a multi-node job went away, or never came."""

    exit_code = 1


@dataclass(frozen=True)
class Nodes:
    """This node's place in the job (``trainer.nnodes``, ``node_rank``, ``rdzv_endpoint``)."""

    count: int = 1
    rank: int = 0
    endpoint: str = ""

    @classmethod
    def of_job(cls, job: JobSpec) -> Nodes:
        # not from the run directory's config.yaml: every node writes it, with its own rank
        return cls(job.nnodes, job.node_rank, job.rdzv_endpoint)

    @property
    def multi(self) -> bool:
        return self.count > 1

    def label(self) -> str:
        return f"node {self.rank} of {self.count}"

    def check_run_dir(self, run_dir: str) -> None:
        """A multi-node job needs a run directory every node names the same way."""
        if self.multi and resume._runs_root(Path(run_dir)) is not None:
            raise ConfigError(
                f"trainer.nnodes={self.count}: every node must use one run directory, and "
                f"{run_dir} is a timestamped folder of this host. Add hydra.run.dir=<folder on "
                f"a filesystem every node mounts>, the same on every node"
            )

    def launch_settings(self, run_dir: str) -> dict[str, Any]:
        """The elastic launcher's rendezvous for this node: N nodes at node 0's endpoint, with
        a run id every node derives alike from the shared run directory's name."""
        digest = hashlib.sha256(Path(run_dir).name.encode()).hexdigest()[:12]
        return {
            "min_nodes": self.count,
            "max_nodes": self.count,
            "run_id": f"xirang-{digest}",
            "rdzv_endpoint": self.endpoint,
            # node 0 serves the store; the others only connect (and wait for it to come up)
            "rdzv_configs": {"is_host": self.rank == 0},
        }

    def check_summary(self, run_dir: str) -> None:
        """After a finished job: the summary rank 0 wrote must be in this node's directory."""
        if self.multi and not (Path(run_dir) / report.SUMMARY_FILE).exists():
            raise NodeLost(
                f"{self.label()} finished, but {run_dir} has no {report.SUMMARY_FILE} from the "
                f"job's rank 0: the run directory is not shared between the nodes. Give every "
                f"node hydra.run.dir=<the same folder on a shared filesystem>"
            )

    def lost_hint(self) -> str:
        """What a failure of a multi-node job most likely means, and how it goes on."""
        if not self.multi:
            return ""
        return (
            f"; {self.label()}: a worker or launcher on another node stopped or its node was "
            f"lost. Run the same command again on every node to resume from the last checkpoint"
        )
