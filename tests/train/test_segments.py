"""A run's figures across its segments: a stop, a resume and a worker that died mid-way."""

from __future__ import annotations

import json
from pathlib import Path

from xirang_core.specs import CostQuote
from xirang_core.train.segments import SEGMENTS_FILE, Segment, read_whole_run

TOKENS_PER_STEP = 100


def _write(run_dir: Path, name: str, lines: list[dict]) -> None:
    with open(run_dir / name, "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def _record(segment: int, step: int, loss: float, elapsed: float) -> dict:
    return {
        "segment": segment,
        "step": step,
        "loss": loss,
        "elapsed_s": elapsed,
        "tokens": step * TOKENS_PER_STEP,
    }


def test_the_whole_run_counts_every_segment_and_each_step_once(tmp_path: Path) -> None:
    # segment 1: steps 1-10 in 10 s, stopped (checkpoint 10); segment 2: a killed worker after
    # step 14, logged at 4 s; segment 3 (this one): steps 13-20 from checkpoint 12, in 8 s
    _write(
        tmp_path,
        SEGMENTS_FILE,
        [
            {"segment": 1, "start_step": 1, "peak_flops": 1000.0},
            {"segment": 1, "last_step": 10, "wall_s": 10.0, "compile_s": 0.0, "compile_steps": 0},
            {"segment": 2, "start_step": 11, "peak_flops": 1000.0},
            {"segment": 3, "start_step": 13, "peak_flops": 500.0},  # a smaller world after eviction
        ],
    )
    _write(
        tmp_path,
        "metrics.jsonl",
        [
            _record(1, 1, 8.0, 1.0),
            _record(1, 10, 6.0, 10.0),
            _record(2, 14, 5.0, 4.0),
            _record(3, 14, 4.9, 2.0),
            _record(3, 20, 4.0, 8.0),
        ],
    )
    current = Segment(3, 13, 500.0, last_step=20, wall_s=8.0)
    whole = read_whole_run(tmp_path, current)
    assert whole.restarts == 2 and whole.wall_s == 22.0
    assert [s.steps for s in whole.segments] == [10, 4, 8]
    # 22 steps computed (two recomputed after the kill) in 22 s
    assert whole.tokens_per_s(TOKENS_PER_STEP) == 22 * TOKENS_PER_STEP / 22.0
    flops_per_token = 0.1  # 10 FLOPs a step
    mfu = whole.mfu(TOKENS_PER_STEP, flops_per_token)
    assert mfu == (22 * TOKENS_PER_STEP * flops_per_token) / (1000 * 10 + 1000 * 4 + 500 * 8)
    assert [(r["step"], r["loss"]) for r in whole.records] == [
        (1, 8.0),
        (10, 6.0),
        (14, 4.9),
        (20, 4.0),  # step 14 as the last segment computed it
    ]

    def quote(seconds: float) -> CostQuote:
        return CostQuote("cpu", 1, seconds, amount=seconds * 0.5)

    cost = whole.cost(quote)
    assert cost.amount == 11.0 and cost.seconds == 22.0
