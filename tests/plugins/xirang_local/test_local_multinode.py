"""The same command on two "nodes" (two launchers on loopback, one worker each) forms one job
that trains exactly as one node with two workers; a node lost mid-run ends the other's run with
a clear error instead of a hang. Real command lines, real c10d rendezvous, real gloo."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT
from xirang_core.checkpoint.events import read_events
from xirang_core.train.resume import latest_saved_step

pytestmark = pytest.mark.slow

# one thread per worker on both sides: a launcher sizes its workers' threads by the workers of
# its own node, and here the two "nodes" share one machine's cores
RUN = (
    *ONE_LAYER_GPT,
    "parallel=ddp",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    "trainer.threads=1",
)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(rank: int, port: int, run_dir: Path, *args: str) -> subprocess.Popen[str]:
    """One node's launcher, in a session of its own (so a test can take the node down)."""
    command = [
        sys.executable,
        "-m",
        "xirang",
        *RUN,
        "trainer.nnodes=2",
        f"trainer.node_rank={rank}",
        f"trainer.rdzv_endpoint=127.0.0.1:{port}",
        f"hydra.run.dir={run_dir}",
        *args,
    ]
    return subprocess.Popen(
        command,
        cwd=run_dir.parent,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


def shards(run_dir: Path, step: int) -> dict[str, str]:
    """The checkpoint's tensor data files (weights, optimizer state) by content hash."""
    manifest = run_dir / "checkpoints" / f"step-{step:09d}" / "manifest.json"
    files = json.loads(manifest.read_text())["files"]
    return {name: f["sha256"] for name, f in files.items() if name.endswith(".raw")}


def test_two_nodes_of_one_worker_train_as_one_node_of_two(
    run_xirang: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    steps = ("trainer.max_steps=4",)
    one = run_xirang(*RUN, *steps, "trainer.nproc=2", f"hydra.run.dir={tmp_path / 'one'}")
    assert one.returncode == 0, one.stderr[-3000:]
    port, run_dir = free_port(), tmp_path / "two"
    run_dir.mkdir()
    launchers = [node(rank, port, run_dir, *steps) for rank in (0, 1)]
    outputs = [p.communicate(timeout=600) for p in launchers]
    for p, (_, err) in zip(launchers, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert "on node 1 of 2, meeting the others at 127.0.0.1" in " ".join(outputs[1][1].split())
    assert losses(run_dir) == pytest.approx(losses(tmp_path / "one"), abs=1e-6)
    assert len(losses(run_dir)) == 4
    assert shards(run_dir, 4) == shards(tmp_path / "one", 4)  # bitwise the same weights


def wait_for(condition: Callable[[], bool], launchers: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        for p in launchers:
            assert p.poll() is None, p.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the job did not get there in 300 s"
        time.sleep(0.2)


def test_a_stop_reaches_every_node_and_a_lost_node_ends_the_others_run(tmp_path: Path) -> None:
    port, run_dir = free_port(), tmp_path / "run"
    run_dir.mkdir()
    job = (port, run_dir, "trainer.max_steps=100000", "checkpoint.async_save=false")
    launchers = [node(rank, *job) for rank in (0, 1)]
    try:
        wait_for((run_dir / "metrics.jsonl").exists, launchers)
        launchers[1].send_signal(signal.SIGTERM)  # as Slurm or Kubernetes stop one node
        stops = [" ".join(p.communicate(timeout=120)[1].split()) for p in launchers]
        assert [p.returncode for p in launchers] == [143, 143], stops
        step = latest_saved_step(run_dir)
        for report in stops:  # both nodes: checkpoint at one step, and how to resume
            assert f"stopped at step {step}, checkpoint saved in {run_dir}. Resume with:" in report

        launchers = [node(rank, *job) for rank in (0, 1)]  # the same commands resume the job
        wait_for(lambda: any(e["event"] == "restore" for e in read_events(run_dir)), launchers)
        wait_for(lambda: len(losses(run_dir)) > step + 2, launchers)
        resumed = [e["step"] for e in read_events(run_dir) if e["event"] == "restore"]
        assert resumed and set(resumed) == {step}
        os.killpg(launchers[1].pid, signal.SIGKILL)  # node 1 goes down: launcher and workers
        lost = time.monotonic()
        _, err = launchers[0].communicate(timeout=120)
    finally:
        for p in launchers:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    report = " ".join(err.split())
    assert launchers[0].returncode not in (0, None, 143)
    assert time.monotonic() - lost < 60  # not a hang until some timeout
    assert "xirang error: worker rank" in report
    assert "node 0 of 2: a worker or launcher on another node stopped" in report
    assert "Run the same command again on every node" in report
