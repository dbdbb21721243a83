"""What each task of a Slurm job of a xirang run executes, without torchrun in between.

``python -m xirang_slurm.task RUN_DIR`` is one worker, its rank and the world taken from Slurm's
task variables. It resolves the run's device, collective backend and calibration itself, on
its node (where the workers run, not on a login node that may have no such device, or another
one); a bad choice is one ``xirang error:`` line in the job's output.

srun starts the workers directly, so the TERM Slurm sends before a time limit or on
``scancel --signal=TERM`` reaches the worker's own stop handler (which tolerates repeats:
Slurm may deliver it two or three times), with no launcher agent in between that dies on the
second copy. A worker stopped that way has saved its checkpoint
at the step's end; rank 0 leaves :data:`STOP_FILE` so the batch script requeues the job, and
the requeued job resumes from that checkpoint.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from xirang import XirangError
from xirang.specs import RunConfig
from xirang_slurm.census import task_census

STOP_FILE = "slurm-stop-requested"


def resolved(run_dir: str) -> RunConfig:
    """The run's config with its runtime resolved on this node (every start again: a requeued
    job may land on other nodes), and its ``comm`` agreed with the other tasks' device types
    (:mod:`xirang_slurm.census`); rank 0 writes it back into ``RUN_DIR/config.yaml``."""
    from xirang import get_registry
    from xirang.worker import CONFIG_FILE, agree_on_comm, resolve_runtime

    path = Path(run_dir) / CONFIG_FILE
    config = resolve_runtime(RunConfig(yaml.safe_load(path.read_text())), get_registry())
    runtime = config["runtime"]  # the launch's (the tokenizer) and this node's
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    config = config.replace(runtime={**runtime, "devices": runtime["devices"] * nodes})  # cost
    first = os.environ.get("RANK") == "0"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # before the process group: the types decide its backend
        types = task_census(int(os.environ["RANK"]), world, runtime["device_type"])
        config, said = agree_on_comm(config, types, get_registry())
        if said and first:
            print(f"xirang: {said}", file=sys.stderr, flush=True)
    if first:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.replace(path)
    return config


def task_env(env: dict[str, str]) -> dict[str, str]:
    """torch.distributed's variables for this task from Slurm's (MASTER_ADDR and MASTER_PORT
    come from the batch script, which picked a free port on the first node)."""
    per_node = env.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]
    return {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": env["SLURM_NTASKS"],
        "LOCAL_RANK": env["SLURM_LOCALID"],
        "LOCAL_WORLD_SIZE": per_node,
    }


def check_world(config: Mapping[str, Any], world: int) -> None:
    """The job's tasks must be the workers the run's batch arithmetic divided the global batch
    over: a pool that spread a run's devices unevenly over its nodes starts a whole number of
    tasks per node, which can be fewer, and each would train a wrong share of the batch."""
    from xirang import ConfigError
    from xirang.launch import run_workers

    workers, named = run_workers(config)
    if world != workers:
        raise ConfigError(
            f"this Slurm job runs {world} task(s) but the run divides its global batch over "
            f"{workers} worker(s) ({named}); place it on nodes that each hold the same number "
            f"of its workers (a worker count that divides over the nodes)"
        )


def train(run_dir: str) -> None:
    """One worker of the run; a requested stop leaves :data:`STOP_FILE` and exits 143."""
    from xirang import worker
    from xirang.launch import RunInterrupted
    from xirang.worker import RESTART_ENV

    os.environ.update(task_env(dict(os.environ)))
    config = resolved(run_dir)
    check_world(config, int(os.environ["WORLD_SIZE"]))
    requeues = os.environ.get("SLURM_RESTART_COUNT", "0")
    if requeues != "0":  # a requeued job is the same run going on: from its own checkpoint
        os.environ[RESTART_ENV] = requeues
        if config["checkpoint"]["resume"] == "never":
            config = config.replace(checkpoint={**config["checkpoint"], "resume": "auto"})
    try:
        worker.main(run_dir, config)
    except RunInterrupted as stop:
        if os.environ["RANK"] == "0":
            (Path(run_dir) / STOP_FILE).write_text(f"{stop}\n")
        print(f"xirang: {stop}", file=sys.stderr, flush=True)
        sys.exit(stop.exit_code)


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python -m xirang_slurm.task RUN_DIR")
    try:
        train(argv[0])
    except XirangError as exc:  # one line in the job's output, as the command line prints it
        print(f"{exc.label}: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main(sys.argv[1:])
