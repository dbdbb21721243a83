"""The real Slurm clusters the Slurm tests submit to: single-node (.ci/services/slurm.sh) and
two nodes of network namespaces (.ci/services/slurm_multinode.sh).

Without Slurm these tests skip locally and FAIL in CI (CI=true), where the service must run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from xirang_local.quota import process_under_quota


@pytest.fixture(scope="session")
def slurm() -> str:
    """The name of the Slurm node this machine runs, once slurmctld answers."""
    problem = ""
    if shutil.which("sbatch") is None:
        problem = "Slurm is not installed (run .ci/services/slurm.sh)"
    else:
        probe = subprocess.run(["sinfo", "-h", "-o", "%n %T"], capture_output=True, text=True)
        if probe.returncode != 0 or not probe.stdout.strip():
            problem = f"slurmctld does not answer: {probe.stderr.strip()}"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return probe.stdout.split()[0]


#: where .ci/services/slurm_multinode.sh keeps its cluster (its MN_DIR)
MULTINODE_DIR = Path(os.environ.get("XIRANG_SLURM_MULTINODE", "/tmp/xirang-multinode"))
MULTINODE_SERVICE = Path(__file__).parents[3] / ".ci" / "services" / "slurm_multinode.sh"


@dataclass(frozen=True)
class MultiNodeSlurm:
    """The 2-node Slurm of network namespaces: its client config, partition and nodes."""

    conf: Path
    partition: str
    nodes: tuple[str, ...]

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client (sbatch, xirang's scheduler) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    @property
    def hostlist(self) -> str:
        """Slurm's compact host list of the nodes: ``node[1-2]``."""
        numbers = [n.removeprefix("node") for n in self.nodes]
        return f"node[{numbers[0]}-{numbers[-1]}]"

    def run(self, *args: str, check: bool = True) -> str:
        """A Slurm command's output, on this cluster."""
        env = {**os.environ, **self.env}
        return subprocess.run(args, capture_output=True, text=True, env=env, check=check).stdout

    def namespace(self, node: str) -> str:
        """The network namespace node ``nodeN`` runs in (the service names it ``xrnN``)."""
        return "xrn" + node.removeprefix("node")

    def wait_down(self, node: str, timeout: float = 60) -> None:
        """Until Slurm has marked ``node`` down (it stopped answering)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "down" in self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", check=False):
                return
            time.sleep(0.2)
        raise AssertionError(f"Slurm did not mark {node} down in {timeout:.0f} s")

    @contextlib.contextmanager
    def under_quota(self, node: str, cpus: float) -> Iterator[None]:
        """Node ``nodeN`` as a slower machine for real: its slurmd (and so every job step it
        starts) under a CFS quota of ``cpus`` (``xirang_local.quota.process_under_quota``)."""
        pid = int((MULTINODE_DIR / "run" / f"slurmd-{node}.pid").read_text())
        with process_under_quota(pid, cpus, f"test-{node}"):
            yield

    def restore(self) -> None:
        """Start what is missing again (a killed node's slurmd: its replacement)."""
        done = subprocess.run(
            ["bash", str(MULTINODE_SERVICE), "up"], capture_output=True, text=True
        )
        assert done.returncode == 0, f"{MULTINODE_SERVICE} up failed:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="session")
def slurm_multinode() -> MultiNodeSlurm:
    """The multi-node cluster, once all of its nodes answer (.ci/run starts it)."""
    conf = MULTINODE_DIR / "etc" / "slurm.conf"
    problem = ""
    if shutil.which("sbatch") is None:
        problem = "Slurm is not installed (run .ci/services/slurm_multinode.sh)"
    elif not conf.exists():
        problem = f"no multi-node Slurm config at {conf} (run .ci/services/slurm_multinode.sh)"
    else:
        probe = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %P %T"],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_CONF": str(conf)},
        )
        rows = [line.split() for line in probe.stdout.splitlines()]
        up = [r for r in rows if r[2].rstrip("*") in ("idle", "mixed", "allocated")]
        if probe.returncode != 0 or len(up) < 2:
            problem = f"the multi-node Slurm has {len(up)} of 2 nodes up: {probe.stderr.strip()}"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return MultiNodeSlurm(conf, up[0][1].rstrip("*"), tuple(sorted(r[0] for r in up)))
