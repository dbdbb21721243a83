"""A 200-step tiny-GPT run under each comm option ends near plain all-reduce's loss.

Measured over seeds 0-2 (per-name parameter init): powersgd ends 0.7-3.3% above plain, topk
2.7-9.2%, localsgd 2.5-9.6%, diloco 2.5-9.9% (fp16, bf16 and hierarchical within 3% at seed
0); at 400 steps the gaps stay (diloco 12%). An earlier 3% bound held only for one seed of
the old init, so the bound is 12%: it catches an option that stops learning (or diverges),
not seed noise.
"""

from __future__ import annotations

import pytest
from comm_workers import train_many
from xirang_comm.scaling import TrainSettings

from xirang.comm.launch import run_group

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]

STEPS = 200
TOLERANCE = 0.12
#: each option with its shipped defaults (conf/comm/*.yaml), except where noted
OPTIONS = {
    "gloo": {},
    "fp16": {},
    "bf16": {},
    "powersgd": {"rank": 4, "start_iter": 10},
    "topk": {"ratio": 0.1},
    "hierarchical": {"group_size": 1},
    "localsgd": {"every": 8},
    "diloco": {"every": 8, "outer_lr": 0.7, "outer_momentum": 0.5},
}


@pytest.fixture(scope="module")
def final_losses() -> dict[str, float]:
    runs = [
        TrainSettings(
            option=name,
            option_settings=settings,
            steps=STEPS,
            warmup_steps=0,
            micro_batch=4,
            seq_len=32,
        )
        for name, settings in OPTIONS.items()
    ]
    results = run_group(train_many, 2, runs)[0]
    return {r["option"]: r["final_loss"] for r in results}


@pytest.mark.parametrize("option", [name for name in OPTIONS if name != "gloo"])
def test_final_loss_near_plain(final_losses: dict, option: str) -> None:
    plain = final_losses["gloo"]
    assert plain < 3.0, "the baseline itself must have learned something"
    assert abs(final_losses[option] - plain) / plain <= TOLERANCE, final_losses
