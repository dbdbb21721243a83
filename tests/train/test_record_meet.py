"""A logged step's collectives (the loss summed over the workers, a balanced run's tallies)
run where the workers meet anyway, at the gradient sync: a fast worker writes a step's record
without waiting for a slower worker's optimizer step. Issued after the optimizer step, they
held the fast worker of a balanced run, at every logged step, for the slow worker's longer
optimizer step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

from tests.train.meet_worker import run
from xirang_core.train.report import read_metrics

pytestmark = pytest.mark.slow

STEPS = 3


def test_the_record_of_a_step_does_not_wait_for_another_workers_optimizer(
    tiny: dict[str, Any], tmp_path: Path
) -> None:
    mp.spawn(run, args=(tiny, str(tmp_path), STEPS), nprocs=2)
    held = [json.loads(line) for line in (tmp_path / "held.jsonl").read_text().splitlines()]
    assert held == [{"step": s, "record_first": True} for s in range(1, STEPS + 1)]
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert all(r["balance_shares"] == [2, 1] for r in records)
    assert all(len(r["balance_compute_ms"]) == 2 for r in records)
