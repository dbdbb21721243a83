"""``scheduler.cpu_bind=cores``: each local worker on CPUs of its own, as a device of its own
computes; a binding this node cannot give, or one it does not know, is one clear error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ONE_LAYER_GPT, run_dirs

RUN = ("trainer.max_steps=2", "trainer.sample_tokens=0", *ONE_LAYER_GPT)
CPUS = sorted(os.sched_getaffinity(0))


def cpu_events(folder: Path) -> dict[int, list[int]]:
    [run_dir] = run_dirs(folder)
    lines = (run_dir / "checkpoint_events.jsonl").read_text().splitlines()
    return {e["rank"]: e["cpus"] for e in map(json.loads, lines) if e["event"] == "worker_cpus"}


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to bind two workers")
def test_each_worker_runs_on_a_cpu_of_its_own(run_xirang, tmp_path) -> None:
    """Every thread of worker k may run on the k-th CPU only (the worker's own record of what
    the kernel says, after binding); the run trains as usual."""
    done = run_xirang("parallel=ddp", "trainer.nproc=2", "scheduler.cpu_bind=cores", *RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    each = len(CPUS) // 2
    assert cpu_events(tmp_path) == {0: CPUS[:each], 1: CPUS[each : 2 * each]}


def test_unbound_workers_are_left_to_the_kernel(run_xirang, tmp_path) -> None:
    done = run_xirang("parallel=ddp", "trainer.nproc=2", *RUN)
    assert done.returncode == 0, done.stderr[-3000:]
    assert cpu_events(tmp_path) == {}


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (("scheduler.cpu_bind=sockets",), "scheduler.cpu_bind='sockets': one of none, cores"),
        (
            (
                "parallel=ddp",
                f"trainer.nproc={len(CPUS) + 1}",
                f"trainer.global_batch={len(CPUS) + 1}",
                "trainer.micro_batch=1",
                "scheduler.cpu_bind=cores",
            ),
            f"{len(CPUS) + 1} workers on this node but only {len(CPUS)} CPU(s)",
        ),
    ],
)
def test_a_binding_this_node_cannot_give_is_one_error(
    run_xirang, overrides: tuple[str, ...], says: str
) -> None:
    done = run_xirang(*RUN, *overrides)
    errors = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert done.returncode != 0 and len(errors) == 1 and says in errors[0], done.stderr[-2000:]
