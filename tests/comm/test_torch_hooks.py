"""The gradient options run torch's own DDP comm hooks and averagers (2 gloo workers on CPU):
the gradients and parameters equal those of a model that registers torch's hook directly, and
xirang still counts every byte those hooks send."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import post_localSGD_hook
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import powerSGD_hook
from torch_hook_workers import all_options

from xirang.comm.launch import run_group
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

STEPS = 8
PARAMS = 48 * 32 + 32 * 16  # the workers' model: one DDP bucket
POWERSGD = {"rank": 1, "start_iter": 2}
RUNS = [("gloo", {}), ("fp16", {}), ("bf16", {}), ("powersgd", POWERSGD)]
TORCH_HOOKS = {
    "gloo": default_hooks.allreduce_hook,
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": default_hooks.bf16_compress_hook,
    "powersgd": powerSGD_hook,
    "localsgd": post_localSGD_hook,
}


@pytest.fixture(scope="module")
def runs() -> dict:
    return run_group(all_options, 2, RUNS, STEPS)[0]


@pytest.mark.parametrize("name", [*TORCH_HOOKS])
def test_each_option_runs_torchs_hook(name: str) -> None:
    option = get_registry().create(
        "comm", {"name": name, **(POWERSGD if name == "powersgd" else {})}
    )
    assert option.torch_hook is TORCH_HOOKS[name]


@pytest.mark.parametrize("name", ["gloo", "fp16", "bf16", "powersgd", "localsgd"])
def test_results_equal_torchs_own(runs: dict, name: str) -> None:
    """Gradients (parameters for local SGD) identical to torch's, step by step."""
    for step, (ours, theirs) in enumerate(runs[name]["pairs"]):
        assert torch.equal(ours, theirs), (name, step)


def all_reduces(report: dict) -> tuple[int, int]:
    tally = report["collectives"]["all_reduce@world"]
    return tally["calls"], tally["payload_bytes"]


@pytest.mark.parametrize(("name", "bytes_per_param"), [("gloo", 4), ("fp16", 2), ("bf16", 2)])
def test_bytes_of_one_bucket_per_step(runs: dict, name: str, bytes_per_param: int) -> None:
    assert all_reduces(runs[name]["report"]) == (STEPS, STEPS * PARAMS * bytes_per_param)
    assert runs[name]["report"]["wire_bytes"] == STEPS * PARAMS * bytes_per_param  # 2(p-1)/p = 1


def test_powersgd_bytes_are_the_factors_after_its_warm_up(runs: dict) -> None:
    """Two plain passes, then per pass: the uncompressed rest (none), P (32 + 16 rows) and Q
    (48 + 32 rows) at rank 1, in fp32."""
    warm, compressed = POWERSGD["start_iter"], STEPS - POWERSGD["start_iter"]
    calls, payload = all_reduces(runs["powersgd"]["report"])
    assert calls == warm + 3 * compressed
    assert payload == warm * PARAMS * 4 + compressed * (48 + 80) * 4
    assert runs["powersgd"]["report"]["compressed_buckets"] == compressed


def test_local_sgd_sends_the_parameters_every_h_steps(runs: dict) -> None:
    report = runs["localsgd"]["report"]
    assert report["outer_syncs"] == STEPS // 4
    assert all_reduces(report) == (STEPS // 4, STEPS // 4 * PARAMS * 4)


@pytest.mark.parametrize("start_iter", [0, 1])
def test_powersgd_refuses_a_start_before_ddp_rebuilds_its_buckets(start_iter: int) -> None:
    with pytest.raises(ConfigError, match=f"comm.start_iter={start_iter}: must be at least 2"):
        get_registry().create("comm", {"name": "powersgd", "start_iter": start_iter})
