"""``python -m xirang`` started by torchrun (or ``srun torchrun``, ``accelerate launch``,
Kubeflow's PyTorchJob): torchrun is then the scheduler, so the run adopts its world.

Rank 0 composes and resolves the run as the local scheduler's launcher would, with
``trainer.nproc``/``nnodes`` taken from torchrun's environment (a different value given on the
command line is refused), creates the one run directory and names it to the other ranks through
torchrun's own store; every rank then runs one worker in its own process. Without this each
process composed a one-worker run, made its own directory and joined a group of N, so it ran no
micro-batch at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from xirang_core.errors import ConfigError
from xirang_core.train.runconfig import CONFIG_FILE

#: how long ranks other than 0 wait for rank 0 to resolve the run (it may train a tokenizer)
RESOLVE_TIMEOUT = timedelta(hours=2)
RUN_DIR_KEY = "/xirang/torchrun/run_dir"


@dataclass(frozen=True)
class World:
    """torchrun's world, from the environment it gives every worker."""

    rank: int
    world_size: int
    local_world_size: int
    nnodes: int
    node_rank: int
    master: str  # MASTER_ADDR:MASTER_PORT, where torchrun's store listens
    attempt: str  # TORCHELASTIC_RESTART_COUNT: a restart resolves the run afresh

    @property
    def overrides(self) -> dict[str, Any]:
        """The trainer settings this world sets (``rdzv_endpoint``: for the nodes check only;
        torchrun already formed the group)."""
        values: dict[str, Any] = {
            "nproc": self.local_world_size,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
        }
        if self.nnodes > 1:
            values["rdzv_endpoint"] = self.master
        return values


def world() -> World | None:
    """torchrun's world when this process is one of its workers, else None."""
    env = os.environ
    if "TORCHELASTIC_RUN_ID" not in env or "RANK" not in env:
        return None
    size, local = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"])
    nnodes = int(env.get("GROUP_WORLD_SIZE", size // local))
    if local * nnodes != size:
        raise ConfigError(
            f"torchrun started {size} workers over {nnodes} nodes with {local} on this one: "
            f"xirang needs the same --nproc-per-node on every node (WORLD_SIZE = "
            f"nodes x LOCAL_WORLD_SIZE)"
        )
    return World(
        rank=int(env["RANK"]),
        world_size=size,
        local_world_size=local,
        nnodes=nnodes,
        node_rank=int(env.get("GROUP_RANK", 0)),
        master=f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
        attempt=env.get("TORCHELASTIC_RESTART_COUNT", "0"),
    )


def adopt(args: list[str], found: World) -> list[str]:
    """The command line's overrides with torchrun's world added; a ``trainer.*`` value that
    disagrees with it is refused, naming both."""
    given = dict(_split(arg) for arg in args if "=" in arg)
    added = []
    for key, value in found.overrides.items():
        name = f"trainer.{key}"
        if name in given and given[name] != str(value):
            raise ConfigError(
                f"{name}={given[name]}: torchrun started this run with {name}={value} "
                f"(WORLD_SIZE={found.world_size}, LOCAL_WORLD_SIZE={found.local_world_size}, "
                f"{found.nnodes} node(s)); drop {name} or set it to {value}, or change "
                f"torchrun's --nproc-per-node/--nnodes"
            )
        if name not in given:
            added.append(f"{name}={value}")
    return [*args, *added]


def _split(arg: str) -> tuple[str, str]:
    key, _, value = arg.partition("=")
    return key.lstrip("+~"), value


def _store(found: World) -> Any:
    """torchrun's store (the agent's, at MASTER_ADDR:MASTER_PORT), keys kept per attempt."""
    import torch.distributed as dist

    host, _, port = found.master.rpartition(":")
    store = dist.TCPStore(
        host, int(port), found.world_size, is_master=False, timeout=RESOLVE_TIMEOUT
    )
    return dist.PrefixStore(f"/xirang/attempt_{found.attempt}", store)


def announce(found: World, run_dir: Path) -> None:
    """Rank 0: name the run directory (its ``config.yaml`` written) to the other ranks."""
    _store(found).set(RUN_DIR_KEY, str(run_dir))


def follow(found: World) -> None:
    """A rank other than 0: wait for rank 0's run directory and run this rank's worker in it
    (torchrun stops this process if rank 0 fails before naming it)."""
    from xirang_core.train import worker

    run_dir = _store(found).get(RUN_DIR_KEY).decode()
    if not (Path(run_dir) / CONFIG_FILE).is_file():
        raise ConfigError(
            f"rank {found.rank} (node {found.node_rank}) cannot see rank 0's run directory "
            f"{run_dir}: torchrun across nodes needs the run directory on a file system every "
            f"node shares (run from a shared folder, or set hydra.run.dir to one)"
        )
    worker.main(run_dir)
