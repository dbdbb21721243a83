"""Hidden-communication accounting, sync windows and hierarchy grouping: pure invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xirang.comm.groups import partition_ranks
from xirang.comm.overlap import split_busy_time
from xirang.comm.sync_window import SyncWindow
from xirang_core.errors import ConfigError

interval = st.tuples(st.floats(0, 100), st.floats(0, 50)).map(lambda t: [t[0], t[0] + t[1]])


def union_length(intervals: list[list[float]]) -> float:
    total, cursor = 0.0, float("-inf")
    for start, end in sorted(intervals):
        total += max(0.0, end - max(start, cursor))
        cursor = max(cursor, end)
    return total


@given(st.lists(interval, max_size=8), st.floats(0, 150))
def test_hidden_plus_exposed_is_the_busy_time(intervals: list, mark: float) -> None:
    hidden, exposed = split_busy_time(intervals, mark)
    assert hidden + exposed == pytest.approx(union_length(intervals), abs=1e-6)
    assert hidden <= max(0.0, mark - min((i[0] for i in intervals), default=mark)) + 1e-6


def test_overlapping_buckets_are_not_counted_twice() -> None:
    # two buckets sending at once before backward ends at t=3, the last one after it
    assert split_busy_time([[0, 2], [1, 3], [3, 5]], mark=3) == (3, 2)


@given(
    st.floats(0, 1e6),
    st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
)
def test_a_window_opens_within_one_period_and_lands_in_its_slot(now: float, slots: tuple) -> None:
    count, slot = slots
    window = SyncWindow(period_s=2.0, slot=slot, slots=count)
    delay = window.delay(now)
    assert 0 <= delay < 2.0
    width = 2.0 / count
    phase = (now + delay) % 2.0
    assert slot * width - 1e-6 <= phase < (slot + 1) * width + 1e-6


def test_bad_window_is_refused() -> None:
    with pytest.raises(ConfigError, match="0 <= slot < slots"):
        SyncWindow(period_s=1.0, slot=3, slots=2)


def test_ranks_group_by_key_in_rank_order() -> None:
    keys = [("a", "nvlink0"), ("a", "nvlink1"), ("a", "nvlink0"), ("b", "nvlink0")]
    assert partition_ranks(keys) == [[0, 2], [1], [3]]
