"""``benchmarks/hetero.py``'s straggler figures: the steps from the quota drop to the first
step with work moved off the slowed worker, and the plot of per-rank shares."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hetero.py"


@pytest.fixture(scope="module")
def hetero() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hetero_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shares_by_step(*shares: list[int]) -> list[dict]:
    return [{"step": i + 1, "balance_shares": s} for i, s in enumerate(shares)]


def test_rebalance_steps_count_from_the_drop_to_work_moved_off_the_slowed_rank(
    hetero: ModuleType,
) -> None:
    # noise had moved work onto rank 1 before the drop at step 2; the move off it is at step 5
    records = shares_by_step([4, 4], [3, 5], [3, 5], [3, 5], [5, 3], [6, 2])
    assert hetero.rebalance_steps(records, 2) == 3
    assert hetero.rebalance_steps(shares_by_step([4, 4], [4, 4], [5, 3]), 3) is None


def test_the_plot_is_written(hetero: ModuleType, tmp_path: Path) -> None:
    records = shares_by_step([4, 4], [4, 4], [6, 2])
    records[-1]["balance_stragglers"] = [{"rank": 1, "step": 3, "speed_ratio": 0.3}]
    out = tmp_path / "plots" / "shares.png"
    hetero.plot_shares(records, 2, 0.4, out)
    assert out.read_bytes().startswith(b"\x89PNG")


def test_every_run_is_timed_from_the_end_of_the_warmup_steps(hetero: ModuleType) -> None:
    # a slow first step (start-up) does not count: 2 steps of 1,000 tokens in 4 s after it
    records = [
        {"step": 1, "tokens": 1000, "elapsed_s": 10.0},
        {"step": 2, "tokens": 2000, "elapsed_s": 12.0},
        {"step": 3, "tokens": 3000, "elapsed_s": 14.0},
    ]
    assert hetero.steady_tokens_per_s(records, 1) == 500.0
    assert hetero.steady_tokens_per_s(records, 2) == 500.0
