"""Whatever the planner offers, the config check and the scheduler's placement accept: the
three share one validity check, and a plan that cannot run is never blamed on the hardware."""

from __future__ import annotations

from pathlib import Path

import pytest
from xirang_local.devices import LocalDevices, fits
from xirang_local.scheduler import _placement

from xirang_core.config import _check_batch, compose
from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ModelShape, candidate_plans
from xirang_core.specs import JobSpec

#: what parallel=auto, parallel.smoke=true and `xirang plan` picked for four workers here
PICKED = [
    "model=gpt_tiny",
    "tokenizer=bytes",
    "trainer.nproc=4",
    "trainer.global_batch=16",
    "trainer.micro_batch=8",
    "parallel=hybrid",
    "parallel.dp=2",
    "parallel.pp=2",
    "parallel.zero=0",
    "parallel.schedule=gpipe",
]
SHAPE = ModelShape(layers=4, hidden=64, heads=4, vocab=256, seq_len=32, params=200_000)


class Healthy:
    """A shareable device whose probe finds nothing (the host CPU)."""

    shareable = True

    def health(self) -> list:
        return []


def test_the_plan_the_planner_picked_is_accepted_and_placed_on_every_worker() -> None:
    config = compose(PICKED)  # the config check once refused it (4 sequences per worker)
    assert config["trainer"]["micro_batch"] == 8
    local = LocalDevices(Healthy(), [0], True, config)
    assert local.place(4) == [0, 0, 0, 0]  # once: none, "no healthy local device left"


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("global_batch", [8, 16])
def test_every_plan_the_planner_offers_passes_the_trainers_checks(
    world: int, global_batch: int
) -> None:
    for plan in candidate_plans(world, SHAPE, global_batch):
        settings = plan.settings()  # the parallel section parallel=auto writes
        trainer = {"nproc": world, "global_batch": global_batch, "micro_batch": plan.micro_batch}
        trainer["grad_accum"] = 0  # as the default config: the micro-batch says it
        trainer.update(max_steps=1, log_every=1)
        # raises ConfigError if the config check refused it
        _check_batch({"trainer": trainer, "parallel": settings})
        config = {"trainer": trainer, "parallel": settings}
        assert fits(world, config), plan.label()


def test_a_plan_that_cannot_run_is_named_not_blamed_on_devices(tmp_path: Path) -> None:
    config = {"trainer": {"global_batch": 6, "micro_batch": 4}, "parallel": {"name": "ddp"}}
    local = LocalDevices(Healthy(), [0], True, config)
    with pytest.raises(ConfigError) as refused:
        _placement(local, JobSpec(str(tmp_path), nproc=1), restarts=0)
    assert "global batch 6 is not a multiple of dp x micro_batch = 1 x 4" in str(refused.value)
    assert "healthy" not in str(refused.value)
