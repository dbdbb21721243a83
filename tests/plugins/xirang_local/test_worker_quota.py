"""``scheduler.worker_quota``: each local worker under its own cgroup v1 CPU quota (a slower
device made real, as Kubernetes CPU limits are), and the cgroups gone after the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from xirang_local.quota import CPU_CGROUP

from tests.conftest import ONE_LAYER_GPT, run_dirs

RUN = ("trainer.max_steps=4", "trainer.sample_tokens=0", *ONE_LAYER_GPT)


@pytest.fixture
def cgroups() -> set[str]:
    """The xirang cgroups before the test (the test checks its own are gone after)."""
    if not os.access(CPU_CGROUP, os.W_OK):
        problem = f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)"
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return {p.name for p in CPU_CGROUP.glob("xirang-*")}


def quota_events(folder: Path) -> list[dict]:
    [run_dir] = run_dirs(folder)
    lines = (run_dir / "checkpoint_events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "worker_quota"]


@pytest.mark.slow
def test_two_workers_each_run_under_their_own_quota(run_xirang, tmp_path, cgroups) -> None:
    done = run_xirang("parallel=ddp", "trainer.nproc=2", "scheduler.worker_quota=[1.0,0.4]", *RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    events = quota_events(tmp_path)
    assert [(e["rank"], e["cpus"]) for e in events] == [(0, 1.0), (1, 0.4)]
    assert all(e["periods"] > 0 for e in events)  # each worker ran in its cgroup
    assert {p.name for p in CPU_CGROUP.glob("xirang-*")} <= cgroups


def test_one_worker_in_process_is_throttled_and_leaves_its_cgroup(
    run_xirang, tmp_path, cgroups
) -> None:
    """One worker runs in the launching process: it joins the cgroup, the kernel throttles it
    at its quota, and it moves back out before the cgroup is removed."""
    done = run_xirang("scheduler.worker_quota=[0.2]", *RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    [event] = quota_events(tmp_path)
    assert event["cpus"] == 0.2 and event["throttled"] > 0
    assert {p.name for p in CPU_CGROUP.glob("xirang-*")} <= cgroups


@pytest.mark.parametrize(
    ("quota", "says"),
    [
        ("[0]", "0.0 is not a CPU count in (0,"),
        ("[1.0,0.5]", "2 value(s) for 1 worker(s)"),
        ("fast", "scheduler.worker_quota"),
    ],
)
def test_a_quota_that_cannot_be_set_is_one_error(run_xirang, quota: str, says: str) -> None:
    done = run_xirang(f"scheduler.worker_quota={quota}", *RUN)
    errors = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert done.returncode != 0 and len(errors) == 1 and says in errors[0], done.stderr[-2000:]


def test_a_running_process_and_what_it_starts_go_under_a_quota_for_a_while(cgroups) -> None:
    """The Slurm test bed's slower node: a running process (there, slurmd) is moved under a
    quota, a process it starts meanwhile is under it too, and after the block both are back
    in their own cgroup and the cgroup made for it is gone."""
    import subprocess
    import sys

    from xirang_local.quota import cgroup_of, process_under_quota

    script = "import subprocess, sys; input(); print(subprocess.Popen(sys.argv[1:]).pid); input()"
    parent = subprocess.Popen(
        [sys.executable, "-c", script, "sleep", "30"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    home, child = cgroup_of(parent.pid), 0
    try:
        with process_under_quota(parent.pid, 0.5, "test-node") as folder:
            assert cgroup_of(parent.pid) == folder and folder.name.startswith("xirang-test-node-")
            assert (folder / "cpu.cfs_quota_us").read_text().strip() == "50000"
            parent.stdin.write("\n")  # let it start its child now, inside the block
            parent.stdin.flush()
            child = int(parent.stdout.readline())
            assert cgroup_of(child) == folder
        assert cgroup_of(parent.pid) == home and cgroup_of(child) == home
        assert not folder.exists()
    finally:
        parent.kill()
        if child:
            os.kill(child, 9)
    assert {p.name for p in CPU_CGROUP.glob("xirang-*")} == cgroups
