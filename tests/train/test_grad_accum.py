"""``trainer.grad_accum``: gradient accumulation steps under their usual name (the HF
Trainer's ``gradient_accumulation_steps``), the same setting as the micro-batch it implies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.conftest import ONE_LAYER_GPT
from tests.train.conftest import assembled
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.train.loop import Trainer

RUN = (*ONE_LAYER_GPT, "device=cpu", "trainer.global_batch=8", "trainer.max_steps=3")


def test_grad_accum_sets_the_micro_batch_and_micro_batch_fills_grad_accum() -> None:
    by_accum = compose([*RUN, "trainer.grad_accum=4"])["trainer"]
    by_micro = compose([*RUN, "trainer.micro_batch=2"])["trainer"]
    assert (by_accum["micro_batch"], by_accum["grad_accum"]) == (2, 4)
    assert (by_micro["micro_batch"], by_micro["grad_accum"]) == (2, 4)
    assert compose(RUN)["trainer"]["grad_accum"] == 1  # the default: one pass per step


def test_grad_accum_counts_per_data_parallel_rank() -> None:
    trainer = compose([*RUN, "trainer.nproc=2", "parallel=ddp", "trainer.grad_accum=2"])["trainer"]
    assert (trainer["micro_batch"], trainer["grad_accum"]) == (2, 2)  # 8 = 2 ranks x 2 x 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.grad_accum=4", "trainer.micro_batch=4"],
            r"trainer.grad_accum=4 and trainer.micro_batch=4 disagree: 4 micro-batches of 4 "
            r"are 16 sequences, but each data-parallel rank takes 8 .*Set only one",
        ),
        (["trainer.grad_accum=3"], r"trainer.grad_accum=3 does not divide .*\[1, 2, 4, 8\]"),
        (["trainer.grad_accum=-1"], r"trainer.grad_accum=-1 does not divide"),
    ],
)
def test_conflicting_or_impossible_accumulation_is_refused(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        compose([*RUN, *overrides])


def test_the_cli_names_the_conflict_in_one_line(run_xirang: Callable) -> None:
    result = run_xirang(*RUN, "trainer.grad_accum=2", "trainer.micro_batch=2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xirang error: trainer.grad_accum=2 and ")


def trained(overrides: list[str], run_dir: Path) -> tuple[int, dict[str, torch.Tensor]]:
    """(micro-batches per step, weights) after training ``RUN`` with ``overrides`` here."""
    with assembled([*RUN, *overrides], run_dir) as parts:
        hook = get_registry().hook
        Trainer(
            parts.wrapped, parts.optimizer, parts.train, parts.settings, parts.ctx, hook, None
        ).fit()
        weights = {k: v.clone() for k, v in parts.model.state_dict().items()}
        return parts.settings.accum_steps, weights


def test_grad_accum_trains_the_same_weights_as_its_micro_batch(tmp_path: Path) -> None:
    accum, by_accum = trained(["trainer.grad_accum=4"], tmp_path / "accum")
    micro, by_micro = trained(["trainer.micro_batch=2"], tmp_path / "micro")
    assert accum == micro == 4
    assert all(torch.equal(by_accum[k], by_micro[k]) for k in by_accum)
    # another split of the same batch: the same update up to float rounding, not the same bits
    whole_accum, whole = trained(["trainer.grad_accum=1"], tmp_path / "whole")
    assert whole_accum == 1
    assert all(torch.allclose(by_accum[k], whole[k], atol=1e-5) for k in whole)
    assert not all(torch.equal(by_accum[k], whole[k]) for k in whole)
