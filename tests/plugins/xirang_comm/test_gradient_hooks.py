"""Each gradient hook on 2-4 spawned gloo workers on CPU, against the exact mean gradient."""

from __future__ import annotations

import pytest
import torch
from comm_workers import compare_options, periodic_many

from xirang.comm.launch import run_group

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def cumulative_error(result: dict, steps: int) -> float:
    """How far the sum of applied updates is from the sum of exact mean gradients."""
    return relative(sum(result["applied"][:steps]), sum(result["exact"][:steps]))


@pytest.fixture(scope="module")
def four_workers_integer() -> dict:
    """Integer-valued gradients (exact in fp32) under plain and hierarchical all-reduce."""
    options = [("gloo", {}), ("hierarchical", {"group_size": 2})]
    return run_group(compare_options, 4, options, 4, True)[0]


@pytest.fixture(scope="module")
def two_workers() -> dict:
    """Constant per-rank gradients, so error feedback must make the sums converge."""
    options = [
        ("fp16", {}),
        ("bf16", {}),
        ("powersgd", {"rank": 1, "start_iter": 2}),
        ("topk", {"ratio": 0.05}),
        ("hierarchical", {"group_size": 1}),
    ]
    return run_group(compare_options, 2, options, 40, False, False)[0]


def test_plain_allreduce_is_the_exact_mean(four_workers_integer: dict) -> None:
    result = four_workers_integer["gloo"]
    assert all(torch.equal(a, e) for a, e in zip(result["applied"], result["exact"], strict=True))


def test_hierarchical_fp32_equals_plain_allreduce(four_workers_integer: dict) -> None:
    plain, hier = four_workers_integer["gloo"], four_workers_integer["hierarchical"]
    assert all(torch.equal(a, b) for a, b in zip(hier["applied"], plain["applied"], strict=True))
    assert hier["report"]["groups"] == [[0, 1], [2, 3]]
    levels = set(hier["report"]["collectives"])
    assert levels == {"reduce@intra-block", "all_reduce@inter-group", "broadcast@intra-block"}


def test_hierarchical_real_gradients_match_to_rounding(two_workers: dict) -> None:
    result = two_workers["hierarchical"]
    for applied, exact in zip(result["applied"], result["exact"], strict=True):
        torch.testing.assert_close(applied, exact, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("name", "bound"), [("fp16", 1e-3), ("bf16", 1e-2)])
def test_half_precision_stays_within_its_rounding(two_workers: dict, name: str, bound: float):
    result = two_workers[name]
    pairs = zip(result["applied"], result["exact"], strict=True)
    assert max(relative(a, e) for a, e in pairs) < bound
    plain_bytes = sum(e.numel() * 4 for e in result["exact"])
    assert result["report"]["payload_bytes"] == plain_bytes // 2


@pytest.mark.parametrize("name", ["powersgd", "topk"])
def test_error_feedback_makes_compressed_sums_converge(two_workers: dict, name: str) -> None:
    result = two_workers[name]
    one_step = relative(result["applied"][-1], result["exact"][-1])
    early, late = cumulative_error(result, 10), cumulative_error(result, 40)
    assert one_step > 0.3  # each step alone is a coarse approximation...
    assert late < early / 2 and late < 0.25  # ...but what was not sent is sent later


def test_compressed_options_move_fewer_bytes(two_workers: dict) -> None:
    plain = sum(e.numel() * 4 for e in two_workers["fp16"]["exact"])
    assert two_workers["powersgd"]["report"]["payload_bytes"] < plain / 4
    assert two_workers["topk"]["report"]["payload_bytes"] < plain / 5


PERIODIC = [
    ("localsgd", {"every": 4}),
    ("diloco", {"every": 4, "outer_lr": 0.7, "outer_momentum": 0.9}),
]


@pytest.fixture(scope="module")
def periodic_runs() -> list[dict]:
    """Each rank's parameter history over 8 SGD steps under each periodic-sync option."""
    return run_group(periodic_many, 2, PERIODIC, 8)


@pytest.mark.parametrize("name", [name for name, _ in PERIODIC])
def test_periodic_sync_agrees_every_h_steps_only(periodic_runs: list, name: str) -> None:
    first, second = (rank[name]["history"] for rank in periodic_runs)
    for step in range(8):
        synced = (step + 1) % 4 == 0
        assert torch.equal(first[step], second[step]) == synced, step
    report = periodic_runs[0][name]["report"]
    assert report["outer_syncs"] == 2
    assert set(report["collectives"]) == {"all_reduce@world"}
