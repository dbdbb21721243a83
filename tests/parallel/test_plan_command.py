"""``xirang plan`` for a model a user will train elsewhere: planned at the model's context
length on a described cluster, refused (not OOM-killed) when too large to measure here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xirang", "plan", *args, "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("seq", "planned"), [((), 8192), (("seq=2048",), 2048)])
def test_a_cluster_plan_takes_the_model_s_context(seq: tuple[str, ...], planned: int) -> None:
    done = plan("model=llama3_8b", "cluster=dgx_h100", *seq)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["model"]["seq_len"] == planned


def test_a_model_too_large_to_measure_here_is_one_error() -> None:
    done = plan("model=llama3_8b", "devices=64")  # about 19 GiB each: more than any host's share
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert "GiB per worker" in error and "cluster=dgx_h100" in error


def test_tp_plans_only_that_tensor_parallel_degree() -> None:
    done = plan("model=gpt_125m", "cluster=dgx_h100", "tp=2")
    assert done.returncode == 0, done.stderr[-2000:]
    ranked = json.loads(done.stdout)["ranked"]
    assert ranked and all("xtp2x" in row["plan"] for row in ranked)


def test_a_tp_that_is_not_a_count_is_one_error() -> None:
    done = plan("model=gpt_125m", "cluster=dgx_h100", "tp=two")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [error] = [line for line in done.stderr.splitlines() if line.startswith("xirang error:")]
    assert "tp=two: must be a whole number >= 1" in error
