"""``scheduler=pool``: a real run submitted to a real pool service, run here when admitted."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import QUICK
from xirang_core.checkpoint.signing import KEY_FILE_ENV
from xirang_service.pool.client import PoolClient
from xirang_service.pool.rest import serve
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore


@pytest.fixture
def pool_env(served_pool) -> Iterator[tuple[PoolService, dict[str, str]]]:
    cluster = {
        "nodes": [{"name": "here", "type": "cpu", "devices": 2}],
        "projects": [{"name": "nlp", "guaranteed": 2, "max_priority": "high"}],
    }
    with served_pool(cluster) as served:
        yield served


@pytest.mark.slow
def test_run_is_admitted_by_the_pool_and_reported_done(run_xirang, pool_env) -> None:
    service, env = pool_env
    settings = ["pool.cards=1", "pool.priority=high", "pool.allow_mixing=true"]
    result = run_xirang("scheduler=pool", "project=nlp", *settings, *QUICK, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pool: job 1 submitted" in result.stdout
    (job,) = service.jobs(OPERATOR)
    assert (job["state"], job["priority"], job["project"]) == ("done", "high", "nlp")
    assert job["allow_mixing"] is True
    summary = json.loads((Path(job["payload"]["run_dir"]) / "summary.json").read_text())
    assert job["tokens"] == summary["tokens"] > 0  # what `xirang pool jobs` shows


def test_bad_priority_is_refused_with_the_service_message(run_xirang, pool_env) -> None:
    _, env = pool_env
    result = run_xirang("scheduler=pool", "project=nlp", "pool.priority=urgent", *QUICK, env=env)
    assert result.returncode != 0
    assert "priority 'urgent' is not valid" in result.stderr + result.stdout


def _until(check, what: str, timeout: float = 600.0, proc=None):
    """Poll ``check`` until it returns something truthy (generous: the machine may be loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _records(path: Path) -> list[dict]:
    """The whole lines of a JSON-lines file another process is appending to."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]  # the last piece may be a line still being written
    return [json.loads(line) for line in lines if line.strip()]


def _events(run_dir: Path) -> list[dict]:
    return _records(run_dir / "checkpoint_events.jsonl")


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in _records(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_preempted_run_checkpoints_is_requeued_resumes_and_stops_when_cancelled(
    tmp_path: Path,
) -> None:
    """Local executor: a borrowed run is preempted when the lender needs its card; its worker
    is told (SIGTERM), saves a checkpoint and stops; placed again, it resumes from that step.
    Cancelled later (as a budget stop does), it is told again, saves and the submitter ends.
    Every stop is the test's own doing, so no step of it races the training speed. The pool's
    checkpoint key reaches the workers of both placements: every save is signed, the resume
    checks it, and the key itself is in no file the run wrote nor in its output."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "nodes": [{"name": "here", "type": "cpu", "devices": 1}],
                "projects": [{"name": "batch", "guaranteed": 0}, {"name": "prod", "guaranteed": 1}],
            }
        )
    )
    service = PoolService(PoolStore(tmp_path / "pool.db"), cluster, "priority", "op-token")
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    operator = PoolClient(url, "op-token")
    token = operator.call("PUT", "/v1/projects/batch", {})["token"]
    operator.call("PUT", "/v1/projects/prod", {})
    log_path = tmp_path / "run.log"
    env = {**os.environ, "XIRANG_POOL_URL": url, "XIRANG_POOL_TOKEN": token}
    env.update(XIRANG_RUNS=str(tmp_path / "runs"), OMP_NUM_THREADS="1")
    key = secrets.token_hex(32)
    key_file = tmp_path / "pool.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    env[KEY_FILE_ENV] = str(key_file)
    args = ["scheduler=pool", "project=batch", "scheduler.poll_s=0.2", "checkpoint.interval=0"]
    args += ["trainer.max_steps=100000", "trainer.log_every=1", "trainer.sample_tokens=0"]
    with log_path.open("w") as log:
        run = subprocess.Popen(
            [sys.executable, "-m", "xirang", *args], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
    try:
        jobs = _until(lambda: service.jobs(OPERATOR), "the submission", proc=run)
        run_dir = Path(jobs[0]["payload"]["run_dir"])
        _until(lambda: len(_steps(run_dir)) >= 2, "two training steps", proc=run)
        urgent = operator.submit(project="prod", cards=1, priority="high")
        assert urgent["state"] == "running"  # it took the card back from the borrowed run
        saves = _until(lambda: _saves(run_dir), "the checkpoint of the preempted run", proc=run)
        stopped_at = saves[0]
        operator.complete(urgent["id"], ok=True)  # the card is free again: the run resumes
        _until(lambda: max(_steps(run_dir)) > stopped_at + 1, "steps after resuming", proc=run)
        operator.cancel(1)
        assert run.wait(timeout=600) != 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        server.shutdown()
    output = log_path.read_text()
    assert "its workers checkpointed and stopped" in output and "resuming" in output
    assert "pool job 1 was cancelled by the pool" in output
    restores = [e["step"] for e in _events(run_dir) if e["event"] == "restore"]
    assert restores == [stopped_at]
    assert len(_saves(run_dir)) == 2 and _saves(run_dir)[1] > stopped_at + 1
    job = service.job(OPERATOR, 1)
    assert (job["state"], job["preemptions"]) == ("cancelled", 1)
    manifests = sorted(run_dir.rglob("manifest.json"))
    assert len(manifests) == 2
    assert all(json.loads(m.read_text()).get("signature") for m in manifests)
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert key not in output and not any(key.encode() in p.read_bytes() for p in written)


def _saves(run_dir: Path) -> list[int]:
    return [e["step"] for e in _events(run_dir) if e["event"] == "save"]
