"""Multi-node runs on a real 2-node Slurm (.ci/services/slurm_multinode.sh: one slurmd per
network namespace, each node with its own address on a bridge), through ``scheduler=slurm``.

The same tiny run everywhere; a 1-node 2-worker run of the local launcher is the reference
that the 2-node runs must equal (losses at every step, and the final weights), whether they ran
straight through, were stopped by ``scancel --signal=TERM`` and requeued, or lost a node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.conftest import run_dirs
from tests.plugins.xirang_slurm.conftest import MultiNodeSlurm
from xirang_core.checkpoint.export import model_tensors
from xirang_core.checkpoint.store import CheckpointStore

STEPS = 8
RUN = (
    "tokenizer=bytes",
    "trainer.threads=1",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    f"trainer.max_steps={STEPS}",
    "checkpoint=every_steps",
    "checkpoint.interval=2",
    "checkpoint.resume=never",
)
TWO_NODES = ("scheduler=slurm", "scheduler.nodes=2", "trainer.nproc=1", *RUN)
DDP = "parallel=ddp"


def xirang(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``python -m xirang ARGS`` in ``root``, its runs under ``root/runs``."""
    root.mkdir(parents=True, exist_ok=True)
    env = {"XIRANG_RUNS": str(root / "runs"), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "xirang", *args],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(proc: subprocess.Popen, root: Path, timeout: float = 300) -> Path:
    """The run directory of a run that ended well."""
    out, _ = proc.communicate(timeout=timeout)
    (run_dir,) = run_dirs(root / "runs")
    jobs = "".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert proc.returncode == 0, out[-3000:] + jobs[-3000:]
    return run_dir


def losses(run_dir: Path) -> dict[int, float]:
    """Each step's loss, as the run's last segment to train that step logged it."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def segments_of(run_dir: Path) -> list[dict]:
    return [json.loads(s) for s in (run_dir / "segments.jsonl").read_text().splitlines()]


def compact(nodes: tuple[str, ...]) -> str:
    """Slurm's host list of ``node1``, ``node2``: ``node[1-2]``."""
    numbers = [n.removeprefix("node") for n in nodes]
    return f"node[{numbers[0]}-{numbers[-1]}]"


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    store = CheckpointStore.at(str(run_dir / "checkpoints"))
    newest = next(c for c in store.candidates() if c.manifest is not None)
    return model_tensors(store, newest.manifest)


def assert_same_run(run_dir: Path, reference: Path, unlogged: int = 0) -> None:
    """Same losses at every step (a stop at a step's end leaves that one step unlogged) and
    the same final weights."""
    got, want = losses(run_dir), losses(reference)
    assert len(got) >= STEPS - unlogged and got.keys() <= want.keys(), got
    assert all(abs(got[s] - want[s]) <= 1e-6 for s in got), (got, want)
    ours, theirs = final_weights(run_dir), final_weights(reference)
    assert ours.keys() == theirs.keys()
    assert all(torch.allclose(ours[k], theirs[k], rtol=0, atol=1e-6) for k in ours)


def wait_for_step(run_dir_root: Path, step: int, timeout: float = 240) -> Path:
    """The run directory once its run has saved a checkpoint at ``step`` or later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run_dir in run_dirs(run_dir_root / "runs"):
            events = run_dir / "checkpoint_events.jsonl"
            saves = [
                json.loads(e) for e in (events.read_text().splitlines() if events.exists() else [])
            ]
            if any(e.get("event") == "save" and e["step"] >= step for e in saves):
                return run_dir
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step {step} in time")


def slurm_job(cluster: MultiNodeSlurm) -> str:
    """The one xirang job running on the cluster."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%i %j"],
        capture_output=True,
        text=True,
        env={**os.environ, **cluster.env},
        check=True,
    ).stdout
    (job,) = [line.split()[0] for line in out.splitlines() if " xirang-" in line]
    return job


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The same run on one node with two workers (the local launcher, no Slurm), once per
    ``parallel=...`` choice."""
    done: dict[str, Path] = {}

    def run(strategy: str) -> Path:
        if strategy not in done:
            root = tmp_path_factory.mktemp("one-node")
            done[strategy] = finished(xirang(root, "trainer.nproc=2", strategy, *RUN), root)
        return done[strategy]

    return run


@pytest.fixture
def reference(one_node: Callable[[str], Path]) -> Path:
    return one_node(DDP)


@pytest.mark.service
@pytest.mark.slow
@pytest.mark.parametrize("strategy", [DDP, "parallel=fsdp"])
def test_two_nodes_train_as_one_node_with_two_workers(
    slurm_multinode: MultiNodeSlurm, one_node: Callable[[str], Path], strategy: str, tmp_path: Path
) -> None:
    run_dir = finished(xirang(tmp_path, *TWO_NODES, strategy, env=slurm_multinode.env), tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == STEPS
    script = (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    (out,) = run_dir.glob("slurm-*.out")
    job = subprocess.run(
        ["scontrol", "-o", "show", "job", out.stem.removeprefix("slurm-")],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm_multinode.env},
        check=True,
    ).stdout
    assert f"NodeList={compact(slurm_multinode.nodes)} " in job  # two nodes, two addresses
    assert_same_run(run_dir, one_node(strategy))


@pytest.mark.service
@pytest.mark.slow
def test_term_checkpoints_requeues_and_resumes_to_the_same_weights(
    slurm_multinode: MultiNodeSlurm, reference: Path, tmp_path: Path
) -> None:
    proc = xirang(tmp_path, *TWO_NODES, DDP, env=slurm_multinode.env)
    wait_for_step(tmp_path, 2)
    job = slurm_job(slurm_multinode)
    # as a scheduler preempting it, or a time limit's warning (--signal) would
    subprocess.run(
        ["scancel", "--signal=TERM", job], env={**os.environ, **slurm_multinode.env}, check=True
    )
    run_dir = finished(proc, tmp_path)
    output = "".join(p.read_text() for p in run_dir.glob("slurm-*.out"))
    assert "stopped on request at step" in output and "requeueing job" in output
    starts = [s["start_step"] for s in segments_of(run_dir) if "start_step" in s]
    assert len(starts) == 2 and starts[1] > 2, starts  # resumed after the step it stopped at
    assert_same_run(run_dir, reference, unlogged=1)


@pytest.mark.service
@pytest.mark.slow
def test_a_lost_node_resumes_from_the_last_checkpoint(
    slurm_multinode: MultiNodeSlurm, reference: Path, tmp_path: Path
) -> None:
    proc = xirang(tmp_path, *TWO_NODES, DDP, "trainer.max_restarts=1", env=slurm_multinode.env)
    wait_for_step(tmp_path, 2)
    lost = slurm_multinode.nodes[-1]  # not the batch script's node
    pids = subprocess.run(
        ["ip", "netns", "pids", slurm_multinode.namespace(lost)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert pids, f"nothing runs on {lost}"
    for pid in pids:  # its slurmd, slurmstepd and worker: the node is gone
        os.kill(int(pid), signal.SIGKILL)
    slurm_multinode.wait_down(lost)  # Slurm finds it gone (SlurmdTimeout): it requeues the job
    slurm_multinode.restore()  # a replacement node comes up under the same name
    run_dir = finished(proc, tmp_path)
    starts = [s["start_step"] for s in segments_of(run_dir) if "start_step" in s]
    assert len(starts) >= 2 and starts[1] > 2, starts  # from a checkpoint, not from step 1
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == STEPS
    assert_same_run(run_dir, reference)
