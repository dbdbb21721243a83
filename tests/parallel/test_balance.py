"""``parallel.balance``: how a step's micro-batches are dealt, and what compose refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ONE_LAYER_GPT
from xirang_core.checkpoint.events import read_events
from xirang_core.config import compose
from xirang_core.data.order import Partition
from xirang_core.data.shares import Shares, even_shares, proportional, step_time
from xirang_core.errors import ConfigError
from xirang_core.train.balance import (
    STRAGGLER_WINDOWS,
    Balancer,
    device_name,
    summary_fields,
)


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
    # 11.43:4.57 exactly: rounding gives 11:5 (a step of 5), the least step is 12:4's 4.8
    assert proportional(16, [2.5, 1.0]).counts == (12, 4)


def splits(total: int, world: int) -> list[Shares]:
    """Every split of ``total`` micro-batches over ``world`` ranks, each at least one."""
    if world == 1:
        return [Shares((total,))]
    return [
        Shares((first, *rest.counts))
        for first in range(1, total - world + 2)
        for rest in splits(total - first, world - 1)
    ]


@settings(max_examples=200, deadline=None)
@given(
    speeds=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=4),
    extra=st.integers(0, 12),
)
def test_the_shares_give_the_shortest_step_any_split_gives(speeds: list[float], extra: int) -> None:
    total = len(speeds) + extra
    shares = proportional(total, speeds)
    assert shares.total == total and min(shares.counts) >= 1
    best = min(step_time(split, speeds) for split in splits(total, len(speeds)))
    assert step_time(shares, speeds) <= best * (1 + 1e-12)
    assert proportional(total, [speeds[0]] * len(speeds)) == even_shares(total, len(speeds))


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


def test_a_rank_far_below_its_calibration_is_reported_once_after_its_windows(
    tmp_path: Path,
) -> None:
    """Rank 1 was calibrated as fast as rank 0, then runs at 40% of it: after
    STRAGGLER_WINDOWS windows in a row it is a straggler, with one event; a rank that only
    dips for a window is not."""
    balancer = Balancer("adaptive", 2, Shares((4, 4)), 0, torch.device("cpu"), str(tmp_path))
    balancer.expected = [1.0, 1.0]
    balancer.watch(2, [1.0, 0.3])  # one slow window, then back
    balancer.watch(4, [1.0, 0.9])
    for window in range(STRAGGLER_WINDOWS + 2):
        balancer.watch(6 + 2 * window, [1.0, 0.4])
    events = [e for e in read_events(tmp_path) if e["event"] == "straggler"]
    assert [(e["rank"], e["step"], e["speed_ratio"]) for e in events] == [
        (1, 6 + 2 * (STRAGGLER_WINDOWS - 1), 0.4)
    ]
    assert list(balancer.stragglers) == [1]
    balancer.meet(20, logs=True)
    figures = balancer.figures(1.0, 1)
    assert figures["balance_stragglers"][0]["rank"] == 1
    assert summary_fields(figures)["balance"]["stragglers"][0]["speed_ratio"] == 0.4


def test_a_slower_rank_calibrated_slow_is_no_straggler(tmp_path: Path) -> None:
    """A device calibrated at 40% of the other, running at 40%, is what was expected."""
    balancer = Balancer("adaptive", 2, Shares((6, 2)), 0, torch.device("cpu"), str(tmp_path))
    balancer.expected = [2.5, 1.0]
    for window in range(2 * STRAGGLER_WINDOWS):
        balancer.watch(2 + 2 * window, [1.0, 0.4])
    assert balancer.stragglers == {}
    assert read_events(tmp_path) == []


def saved_shares(device: str) -> dict:
    return {
        "shares": [6, 2],
        "device": device,
        "speeds": [3.0, 1.0],
        "expected": [1.0, 1.0],
        "stragglers": [{"rank": 1, "step": 8, "speed_ratio": 0.33, "share": 2, "of": 8}],
    }


def test_adaptive_resumes_from_the_checkpoints_shares_on_the_same_devices() -> None:
    balancer = Balancer("adaptive", 2, Shares((4, 4)), 0, torch.device("cpu"))
    dealt: list[Shares] = []
    balancer.on_reshare = dealt.append
    balancer.load_state_dict(saved_shares(device_name(torch.device("cpu"))))
    assert balancer.shares == Shares((6, 2)) and dealt == [Shares((6, 2))]
    assert balancer.expected == [1.0, 1.0] and list(balancer.stragglers) == [1]
    # and what a checkpoint keeps is what a resume reads
    assert Balancer("adaptive", 2, Shares((4, 4)), 0, torch.device("cpu")).state_dict()[
        "shares"
    ] == [4, 4]


@pytest.mark.parametrize(
    "state",
    [
        None,  # a checkpoint of a run that did not balance
        saved_shares("cpu quota=0.4"),  # another device (here: under another CPU quota)
        {**saved_shares("cpu"), "shares": [4, 2, 2]},  # another world
    ],
)
def test_a_resume_on_other_devices_keeps_the_calibrated_shares(state: dict | None) -> None:
    balancer = Balancer("adaptive", 2, Shares((5, 3)), 0, torch.device("cpu"))
    balancer.load_state_dict(state)
    assert balancer.shares == Shares((5, 3))


def test_calibrated_shares_are_not_replaced_by_a_checkpoints() -> None:
    """``calibrated`` keeps its (given or calibrated) shares: they are fixed for the run."""
    balancer = Balancer("calibrated", 2, Shares((5, 3)), 0, torch.device("cpu"))
    balancer.load_state_dict(saved_shares("cpu"))
    assert balancer.shares == Shares((5, 3))


def test_a_small_gain_moves_the_shares_when_two_windows_in_a_row_ask_for_it() -> None:
    """At speeds 2.5:1, 12:4 predicts a step 4% shorter than 11:5: under the 5% a single
    window needs, so one window leaves 11:5 and the second window asking moves to 12:4."""
    balancer = Balancer("adaptive", 2, Shares((11, 5)), 0, torch.device("cpu"))
    dealt: list[Shares] = []
    balancer.on_reshare = dealt.append
    assert not balancer.move([2.5, 1.0])
    assert balancer.move([2.5, 1.0])
    assert balancer.shares == Shares((12, 4)) and dealt == [Shares((12, 4))]
    assert not balancer.move([2.5, 1.0])  # at its best, it stays


def test_windows_asking_for_different_small_moves_leave_the_shares() -> None:
    """Noise about 23:9 of 32: windows that each ask for a split under 5% better (24:8 at
    2.7:1, 22:10 at 2.2:1), never the same one twice in a row, move nothing; a gain over 5%
    moves at once."""
    balancer = Balancer("adaptive", 2, Shares((23, 9)), 0, torch.device("cpu"))
    for ratio in (2.7, 2.2, 2.7, 2.2, 2.7):
        assert not balancer.move([ratio, 1.0])
    assert balancer.shares == Shares((23, 9))
    assert balancer.move([3.0, 1.0])  # 24:8 predicts an 11% shorter step
    assert balancer.shares == Shares((24, 8))
