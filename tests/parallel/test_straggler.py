"""A rank that slows mid-run, for real (``drill.slow`` drops its cgroup CPU quota): ``adaptive``
moves work off it within ``balance_every`` steps and reports it as a straggler; and the
adaptive shares a checkpoint holds are where a resume on the same devices starts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from xirang_ckpt.inject import slowdowns

from tests.conftest import ONE_LAYER_GPT
from xirang_core.checkpoint.events import read_events
from xirang_core.devices.cgroup import CPU_CGROUP
from xirang_core.errors import ConfigError

#: eight one-row micro-batches a step over two workers, one thread each, shares every 2 steps
RUN = (
    *ONE_LAYER_GPT,
    "model.n_layer=2",
    "model.n_embd=128",
    "model.n_head=4",
    "data.seq_len=128",
    "parallel=ddp",
    "trainer.nproc=2",
    "trainer.global_batch=8",
    "trainer.micro_batch=1",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    "trainer.threads=1",
    "parallel.balance=adaptive",
    "parallel.balance_every=2",
)
#: the step at whose end rank 1's quota drops from a full core to a twentieth of one (well
#: below what a busy 2-core machine leaves each worker anyway)
SLOW_AT = 4


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([[4, 1]], "give [step, rank, cpus] entries"),
        ([[0, 1, 0.4]], "step at least 1"),
        ([[4, 1, 0]], "cpus above 0"),
        ([[4, 0, 0.4]], "run the workers under scheduler.worker_quota"),  # rank 0: this process
    ],
)
def test_bad_slow_drill_is_one_clear_error(entries: list, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        slowdowns(entries, 0)


def test_a_slow_drill_for_another_rank_leaves_this_one_alone() -> None:
    assert slowdowns([[4, 1, 0.4]], 0) == {}


@pytest.mark.slow
def test_a_rank_slowed_mid_run_is_rebalanced_and_reported(run_xirang: Any, tmp_path: Path) -> None:
    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip(f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)")
    run_dir = tmp_path / "run"
    done = run_xirang(
        *RUN,
        "trainer.max_steps=20",
        "checkpoint.interval=0",
        "scheduler.worker_quota=[1.0,1.0]",
        "parallel.balance_shares=[4,4]",
        f"+drill={{slow:[[{SLOW_AT},1,0.05]]}}",
        f"hydra.run.dir={run_dir}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = read_events(run_dir)
    [slow] = [e for e in events if e["event"] == "slow"]
    assert (slow["step"], slow["rank"], slow["cpus"], slow["was"]) == (SLOW_AT, 1, 0.05, 1.0)
    shares = {r["step"]: r["balance_shares"] for r in records(run_dir)}
    # within two windows of balance_every steps after the drop, work moves off rank 1: below
    # what it held at the drop (which a loaded machine may already have lowered from the even
    # 4, as CI's other worker once made rank 1 look slower at step 2), or down to the least, 1
    before = shares[SLOW_AT][1]
    after = min(shares[step][1] for step in range(SLOW_AT + 1, SLOW_AT + 5))
    assert after < min(before, 4) or after == 1, sorted(shares.items())
    [straggler] = [e for e in events if e["event"] == "straggler"]
    assert straggler["rank"] == 1 and straggler["speed_ratio"] < 0.6
    assert "rank 1 is a straggler" in done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["rank"] for s in summary["balance"]["stragglers"]] == [1]


@pytest.mark.slow
def test_adaptive_shares_resume_from_the_checkpoint(run_xirang: Any, tmp_path: Path) -> None:
    """The shares at step 2 (1:7 as given, or where the balancer moved them) are saved with
    that step's checkpoint, and the resumed run's step 3 runs them, not the 7:1 its own config
    gives: the same devices resume where adaptive left them. (Whether step 2 moves the shares
    depends on the host's load, so the test does not ask it to.)"""
    first, second = tmp_path / "first", tmp_path / "second"
    common = (*RUN, "checkpoint.interval=2")
    done = run_xirang(
        *common, "parallel.balance_shares=[1,7]", "trainer.max_steps=2", f"hydra.run.dir={first}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    moved = records(first)[-1]["balance_shares"]
    assert moved != [7, 1]  # equal workers: a move from 1:7 stops at even shares
    done = run_xirang(
        *common,
        "parallel.balance_shares=[7,1]",
        "trainer.max_steps=3",
        f"checkpoint.resume={first}",
        f"hydra.run.dir={second}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [resumed] = records(second)
    assert (resumed["step"], resumed["balance_shares"]) == (3, moved)
