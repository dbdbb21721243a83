"""``parallel.balance`` end to end on two gloo workers: unequal shares train exactly as one
process does on the same global batches, a resume on another mix continues exactly, and
``adaptive`` moves work off a worker that runs under a CPU quota."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import ONE_LAYER_GPT, xirang_cli

pytestmark = pytest.mark.slow

#: four one-row micro-batches a step, a checkpoint every 2 steps, one thread per worker
RUN = (
    *ONE_LAYER_GPT,
    "trainer.micro_batch=1",
    "trainer.log_every=1",
    "trainer.sample_tokens=0",
    "trainer.threads=1",
    "checkpoint.interval=2",
)
TWO = ("trainer.nproc=2", "parallel.balance=calibrated")


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """The model's weights in ``run_dir``'s checkpoint of ``step`` (``xirang ckpt export``)."""
    out = run_dir.parent / f"{run_dir.name}-{step}.safetensors"
    done = xirang_cli("ckpt", "export", "--step", str(step), str(run_dir), str(out), cwd=run_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    return load_file(out)


def assert_same(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(found) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(found[name], tensor, rtol=0, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-process reference: 4 steps of the same global batches."""
    from tests.conftest import run_in

    folder = tmp_path_factory.mktemp("single")
    done = run_in(folder, *RUN, "trainer.max_steps=4", f"hydra.run.dir={folder / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "run"


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_shares_3_to_1_then_resumed_at_1_to_1_equal_one_process(
    strategy: str, single: Path, run_xirang: Any, tmp_path: Path
) -> None:
    """Steps 1-2 with shares 3:1, then a resume from that checkpoint with shares 2:2: the
    weights after each equal the single process's (fp32, 1e-6)."""
    first, second = tmp_path / "three-one", tmp_path / "even"
    runs = {
        first: ["trainer.max_steps=2", "parallel.balance_shares=[3,1]"],
        second: [
            "trainer.max_steps=4",
            "parallel.balance_shares=[2,2]",
            f"checkpoint.resume={first}",
        ],
    }
    for run_dir, args in runs.items():
        done = run_xirang(*RUN, f"parallel={strategy}", *TWO, *args, f"hydra.run.dir={run_dir}")
        assert done.returncode == 0, done.stderr[-3000:]
    shares = [json.loads(line)["balance_shares"] for line in records(first)]
    assert shares == [[3, 1], [3, 1]]
    assert_same(weights(first, 2), weights(single, 2))
    assert_same(weights(second, 4), weights(single, 4))


def records(run_dir: Path) -> list[str]:
    return (run_dir / "metrics.jsonl").read_text().splitlines()


def test_adaptive_moves_work_off_a_worker_under_a_cpu_quota(
    run_xirang: Any, tmp_path: Path
) -> None:
    """Rank 1 runs under a 0.2-core quota (the machine's cgroups) and starts with 7 of the 8
    micro-batches; adaptive shares end with it running fewer than rank 0. (A full core is
    asked for rank 0; on a loaded 2-core machine it gets less, so the quota is well below.)"""
    from xirang_local.quota import CPU_CGROUP

    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip(f"needs the cgroup v1 CPU controller at {CPU_CGROUP}, writable (root)")
    model = ["model.n_layer=2", "model.n_embd=128", "model.n_head=4", "data.seq_len=128"]
    done = run_xirang(
        *ONE_LAYER_GPT,
        *model,
        "parallel=ddp",
        "trainer.nproc=2",
        "trainer.global_batch=8",
        "trainer.micro_batch=1",
        "trainer.max_steps=16",
        "trainer.log_every=4",
        "trainer.sample_tokens=0",
        "trainer.threads=1",
        "scheduler.worker_quota=[1.0,0.2]",
        "parallel.balance=adaptive",
        "parallel.balance_every=4",
        "parallel.balance_shares=[1,7]",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    logged = [json.loads(line) for line in records(tmp_path / "run")]
    assert logged[0]["balance_shares"] == [1, 7]
    fast, slow = logged[-1]["balance_shares"]
    assert slow < fast, [r["balance_shares"] for r in logged]
    assert all(r["balance_efficiency"] > 0 for r in logged)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["balance"]["shares"] == [fast, slow]
