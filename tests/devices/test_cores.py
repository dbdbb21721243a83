"""Threads from the cores a run really has, OpenMP waits that survive a shared node, and the
warning when other work takes the run's cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ONE_LAYER_GPT, run_dirs
from xirang_core.devices import cores

CPU_V1 = Path("/sys/fs/cgroup/cpu")
#: what a child prints: the cores it may use and a lone worker's default threads
REPORT = (
    "from xirang_core.devices import cores; "
    "print(cores.available_cores(), cores.default_threads(1))"
)


def _report(preexec=None, before: str = "") -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", before + REPORT],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=preexec,
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to narrow")
def test_threads_follow_the_cpu_affinity() -> None:
    """A process pinned to one CPU (taskset, a Slurm allocation) gets one thread."""
    assert _report(preexec=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})) == (
        1,
        1,
    )


@pytest.fixture
def quota_cgroup() -> Iterator[Path]:
    """A real cgroup v1 CPU group limited to one core (100 ms per 100 ms), removed after."""
    if os.geteuid() != 0 or not os.access(CPU_V1, os.W_OK):
        pytest.skip("needs root and a writable cgroup v1 cpu hierarchy")
    folder = CPU_V1 / f"xirang-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        (folder / "cpu.cfs_period_us").write_text("100000")
        (folder / "cpu.cfs_quota_us").write_text("100000")
        yield folder
    finally:
        for _ in range(50):  # the child left it when it exited; the kernel may lag a moment
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to limit")
def test_threads_follow_a_real_cgroup_v1_quota(quota_cgroup: Path) -> None:
    """A child moved into a one-core quota group sees one core, though it may run on all."""
    procs = str(quota_cgroup / "cgroup.procs")
    join = f"import os; open({procs!r}, 'w').write(str(os.getpid())); "
    assert _report(before=join) == (1, 1)
    assert _report() == (len(os.sched_getaffinity(0)), len(os.sched_getaffinity(0)))


def _membership(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return path


def test_quota_of_a_recorded_cgroup_v2_and_its_parent(tmp_path: Path) -> None:
    """cgroup v2 files as a container sees them (contents recorded, not this host's): the
    tightest quota on the way to the root counts, "max" is no limit."""
    root = tmp_path / "fs"
    (root / "kube" / "pod").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "kube" / "cpu.max").write_text("250000 100000\n")
    (root / "kube" / "pod" / "cpu.max").write_text("max 100000\n")
    membership = _membership(tmp_path, "0::/kube/pod\n")
    assert cores.cgroup_quota_cores(root, membership) == 2.5
    assert cores.available_cores(root, membership) == min(2, len(os.sched_getaffinity(0)))
    (root / "kube" / "cpu.max").write_text("max 100000\n")
    assert cores.cgroup_quota_cores(root, membership) is None


def test_quota_of_a_recorded_cgroup_v1_from_inside_a_container(tmp_path: Path) -> None:
    """Inside a container /proc/self/cgroup names the host's path, absent from the
    container's mount: the mount's own root holds the quota."""
    cpu = tmp_path / "fs" / "cpu,cpuacct"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("50000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    membership = _membership(tmp_path, "4:cpu,cpuacct:/docker/0123abcd\n1:memory:/docker\n")
    assert cores.cgroup_quota_cores(tmp_path / "fs", membership) == 0.5
    assert cores.available_cores(tmp_path / "fs", membership) == 1  # never below one


def test_workers_share_the_cores() -> None:
    assert cores.default_threads(4, cores=16) == 4
    assert cores.default_threads(3, cores=2) == 1


def test_a_bound_worker_computes_on_all_of_its_own_cores(monkeypatch) -> None:
    """Bound to its part of the node (``scheduler.cpu_bind=cores``), a worker's affinity is
    already its share: dividing it again among the node's workers would idle cores."""
    monkeypatch.setenv(cores.BOUND_ENV, "0,1,2,3")
    assert cores.default_threads(4, cores=4) == 4


@given(cpus=st.sets(st.integers(0, 255), max_size=64), workers=st.integers(1, 16))
def test_each_worker_gets_as_many_cpus_of_its_own(cpus: set[int], workers: int) -> None:
    slices = cores.cpu_slices(list(cpus), workers)
    if len(cpus) < workers:
        assert slices == []
        return
    taken = [cpu for part in slices for cpu in part]
    assert len(slices) == workers and len({len(part) for part in slices}) == 1
    assert len(taken) == len(set(taken)) and set(taken) <= cpus  # disjoint, the process's own
    assert len(cpus) - len(taken) < workers  # no worker could have had one more
    assert taken == sorted(taken)  # neighbours together


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind")
def test_binding_moves_every_thread_and_those_started_after() -> None:
    """:func:`cores.bind_cpus` in a process that already runs a thread: that thread, the
    main one and one started after all run on the CPU given."""
    script = (
        "import os, threading, time; from xirang_core.devices import cores; "
        "t = threading.Thread(target=time.sleep, args=(3,)); t.start(); "
        "cpu = max(os.sched_getaffinity(0)); cores.bind_cpus([cpu]); "
        "u = threading.Thread(target=time.sleep, args=(3,)); u.start(); "
        "print(cpu, sorted({c for d in os.listdir('/proc/self/task') "
        "for c in os.sched_getaffinity(int(d))}), len(os.listdir('/proc/self/task')), "
        "os.environ[cores.BOUND_ENV])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    cpu, *rest = out.stdout.split(maxsplit=1)
    assert rest == [f"[{cpu}] 3 {cpu}\n"]


def test_omp_defaults_keep_the_users_settings() -> None:
    env = {}
    cores.omp_defaults(env)
    assert env == cores.OMP_DEFAULTS
    env = {"GOMP_SPINCOUNT": "0"}
    cores.omp_defaults(env)
    assert env["GOMP_SPINCOUNT"] == "0"
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    cores.omp_defaults(env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}


@pytest.fixture
def busy_host() -> Iterator[float]:
    """Busy processes, one per CPU, until the load average shows them (up to 3 minutes):
    real load, stopped after the test. Yields the load reached."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        threshold = (os.cpu_count() or 1) - len(os.sched_getaffinity(0)) + 1.0
        deadline = time.monotonic() + 180
        while os.getloadavg()[0] < threshold and time.monotonic() < deadline:
            time.sleep(2)
        assert os.getloadavg()[0] >= threshold, "the busy processes did not load the host"
        yield os.getloadavg()[0]
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.slow
def test_two_workers_on_a_busy_host_warn_and_report_threads(
    tmp_path: Path, busy_host: float
) -> None:
    """Spawned workers start with the bounded OpenMP spin (nobody set one), the main worker
    warns that the host is busy, and the summary names threads, cores and the load."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    env.pop("OMP_WAIT_POLICY", None)
    overrides = (*ONE_LAYER_GPT, "trainer.max_steps=2", "trainer.sample_tokens=0")
    done = subprocess.run(
        [sys.executable, "-m", "xirang", *overrides, "trainer.nproc=2", "parallel=ddp"],
        cwd=tmp_path,
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the host is busy: load average" in done.stderr
    [run_dir] = run_dirs(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    available = len(os.sched_getaffinity(0))
    assert summary["cores"] == available
    assert summary["threads"] == max(1, available // 2)
    assert summary["omp_wait"] == "GOMP_SPINCOUNT=1000 KMP_BLOCKTIME=1"
    assert summary["host_load_start"] >= busy_host - 1.0
    assert "threads" in done.stdout and "host load" in done.stdout


def test_a_quiet_host_is_not_warned_about() -> None:
    assert cores.busy_warning(0.2, 2, host_cpus=2) is None
    assert cores.busy_warning(10.0, 2, host_cpus=64) is None  # a container's share is free
    assert "load average 3.00 on 2 CPUs" in (cores.busy_warning(3.0, 2, host_cpus=2) or "")
