"""model=hf trains under DDP, FSDP2 and (Llama-shaped) tensor/sequence parallel exactly as in
one process: same seed, same global batches, fp32 — the strategy equivalence tests' standard."""

from __future__ import annotations

from pathlib import Path

import pytest

from xirang.planning.smoke import run_plans
from xirang_core.parallel.plan import ParallelPlan

pytestmark = pytest.mark.slow

STEPS = 6
TOLERANCE = 1e-4
SINGLE = ParallelPlan(micro_batch=4)
DATA_PARALLEL = {
    "ddp": ParallelPlan(dp=2, zero=0, micro_batch=2),
    "fsdp zero3": ParallelPlan(dp=2, zero=3, micro_batch=2),
    "fsdp zero2, recompute": ParallelPlan(dp=2, zero=2, micro_batch=2, recompute="full"),
}
TENSOR_PARALLEL = {
    "tp": ParallelPlan(tp=2, micro_batch=4),
    "sp": ParallelPlan(tp=2, sp=True, micro_batch=4),
}


def rel_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    ("which", "plans"),
    [("gpt2_dir", DATA_PARALLEL), ("llama_dir", DATA_PARALLEL | TENSOR_PARALLEL)],
)
def test_two_workers_train_like_one_process(
    which: str, plans: dict[str, ParallelPlan], hf_config, request: pytest.FixtureRequest
) -> None:
    folder: Path = request.getfixturevalue(which)
    config = hf_config(folder)
    (single,) = run_plans(config, [SINGLE], STEPS)
    assert single.losses[-1] < single.losses[0] - 0.05  # it learns: the comparison means something
    measured = run_plans(config, list(plans.values()), STEPS)
    for name, run in zip(plans, measured, strict=True):
        assert rel_diff(run.losses, single.losses) < TOLERANCE, (name, run.losses, single.losses)
