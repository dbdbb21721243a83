"""``parallel.balance``: how a step's micro-batches are dealt, and what compose refuses."""

from __future__ import annotations

import pytest

from tests.conftest import ONE_LAYER_GPT
from xirang_core.config import compose
from xirang_core.data.order import Partition
from xirang_core.errors import ConfigError
from xirang_core.train.balance import Shares, even_shares, proportional, step_time


def step_rows(shares: Shares, micro_batch: int) -> list[list[int]]:
    """Each slot's first row of a step, rank by rank, micro-batch by micro-batch."""
    return [
        [shares.slot(rank, m) * micro_batch for m in range(count)]
        for rank, count in enumerate(shares.counts)
    ]


def test_equal_shares_read_the_uniform_splits_rows() -> None:
    """Balanced with equal shares, each rank reads exactly the rows the uniform split gives it."""
    world, accum, micro = 3, 4, 2
    uniform = [
        [int(Partition(micro, world, r).positions(m)[0]) for m in range(accum)]
        for r in range(world)
    ]
    assert step_rows(Shares((accum,) * world), micro) == uniform


@pytest.mark.parametrize("counts", [(3, 1), (1, 3), (5, 3), (1, 1, 6), (2, 1, 1)])
def test_unequal_shares_cover_the_step_once(counts: tuple[int, ...]) -> None:
    shares = Shares(counts)
    slots = sorted(s for rank in step_rows(shares, 1) for s in rank)
    assert slots == list(range(shares.total))


def test_shares_follow_speed_with_at_least_one_each() -> None:
    assert proportional(8, [1.0, 1.0]).counts == (4, 4)
    assert proportional(8, [2.5, 1.0]).counts == (6, 2)
    assert proportional(4, [100.0, 1.0]).counts == (3, 1)  # never below one micro-batch
    assert sum(proportional(7, [1.0, 2.0, 3.0]).counts) == 7
    assert even_shares(5, 2).counts == (3, 2)
    # the faster split predicts the shorter step
    assert step_time(Shares((6, 2)), [2.5, 1.0]) < step_time(Shares((4, 4)), [2.5, 1.0])


TWO = [*ONE_LAYER_GPT, "trainer.nproc=2", "trainer.micro_batch=1"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["parallel=ddp", "parallel.balance=fast"], "valid values are uniform, calibrated"),
        (["parallel=tp", "parallel.balance=adaptive"], "parallel=tp cannot balance"),
        (["parallel=single", "parallel.balance=adaptive"], "works with parallel=ddp or"),
        (
            ["parallel=fsdp", "parallel.tp=2", "parallel.balance=adaptive"],
            "parallel=fsdp with tp cannot balance",
        ),
        (
            ["parallel=ddp", "parallel.balance=calibrated", "parallel.balance_shares=[3,2]"],
            "summing to global_batch / micro_batch = 4",
        ),
        (["parallel=ddp", "parallel.balance_shares=[3,1]"], "need parallel.balance=calibrated"),
    ],
)
def test_bad_balance_is_one_clear_error(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        compose([*TWO, *overrides])


def test_shares_must_cover_every_rank() -> None:
    """Two micro-batches a step cannot give each of four ranks one: refused at compose."""
    with pytest.raises(ConfigError, match="micro_batch=2 does not divide"):
        compose(
            [
                *ONE_LAYER_GPT,
                "parallel=ddp",
                "trainer.nproc=4",
                "trainer.global_batch=4",
                "trainer.micro_batch=2",
                "parallel.balance=adaptive",
            ]
        )
