"""``scheduler=slurm``: submit the run's workers to Slurm and wait for them to finish."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xirang_core.specs import JobSpec
from xirang_slurm import commands
from xirang_slurm.executor import worker_command
from xirang_slurm.script import BatchJob, render


@dataclass
class SlurmConfig:
    partition: str = ""
    nodes: int = 1
    nodelist: str = ""
    switches: int = 0
    time_limit: str = ""


class SlurmScheduler:
    def __init__(self, **settings: Any) -> None:
        self.config = SlurmConfig(**settings)

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        """sbatch --wait; the workers run ``entrypoint``'s module entry for ``job.run_dir``."""
        nodes = [n for n in self.config.nodelist.split(",") if n]
        batch = BatchJob(
            name=f"xirang-{Path(job.run_dir).name}",
            command=worker_command(job.run_dir),
            nodes=nodes,
            node_count=self.config.nodes,
            procs_per_node=job.nproc,
            switches=self.config.switches,
            partition=self.config.partition,
            time_limit=self.config.time_limit,
            output=str(Path(job.run_dir) / "slurm-%j.out"),
        )
        script = Path(job.run_dir) / "job.sbatch"
        script.write_text(render(batch))
        try:
            commands.run("sbatch", "--wait", "--parsable", str(script), timeout=7 * 24 * 3600)
        except commands.SlurmError as exc:
            raise commands.SlurmError(f"{exc} (script {script}, output in {job.run_dir})") from None
