"""A real ``python -m xirang`` run with a comm option: its summary reports the bytes counted and
the communication hidden; a backend the device cannot use stops the run with one message."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ONE_LAYER_GPT, QUICK, run_dirs

pytestmark = pytest.mark.slow


def test_ddp_run_with_fp16_reports_bytes_and_overlap(run_xirang, tmp_path) -> None:
    done = run_xirang(
        *QUICK,
        "trainer.nproc=2",
        "parallel=ddp",
        "parallel.bucket_cap_mb=1",
        "comm=fp16",
        "trainer.global_batch=4",
        "data.seq_len=64",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run_dirs(tmp_path)[-1] / "summary.json").read_text())
    comm = summary["comm"]
    assert comm["option"] == "fp16"
    assert comm["wire_bytes"] > 0 and comm["wire_bytes_per_step"] > 0
    assert set(comm["collectives"]) == {"all_reduce@world"}
    assert comm["overlap"]["backward_passes"] == summary["steps"]
    assert 0 <= comm["overlap"]["hidden_frac"] <= 1


def test_a_backend_the_device_cannot_use_is_refused(run_xirang) -> None:
    done = run_xirang(*QUICK, "comm=nccl")
    assert done.returncode != 0
    assert "comm=nccl serves cuda, rocm devices, not cpu" in done.stderr.replace("\n", " ")
    assert "Traceback" not in done.stderr


def test_ddp_run_with_mixed_reports_its_type_groups(run_xirang, tmp_path) -> None:
    """comm=mixed in a real run, with unequal token shares: the type comes from the resolved
    runtime (one cpu group here, so its leader has no one to exchange with across types)."""
    done = run_xirang(
        *QUICK,
        *ONE_LAYER_GPT,
        "trainer.nproc=2",
        "parallel=ddp",
        "parallel.balance=calibrated",
        "parallel.balance_shares=[1,3]",
        "trainer.micro_batch=1",
        "comm=mixed",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    comm = json.loads((run_dirs(tmp_path)[-1] / "summary.json").read_text())["comm"]
    assert comm["option"] == "mixed"
    assert comm["types"] == {"cpu": {"ranks": [0, 1], "leader": 0, "backend": "gloo"}}
    assert set(comm["collectives"]) == {"reduce@intra-type", "broadcast@intra-type"}
