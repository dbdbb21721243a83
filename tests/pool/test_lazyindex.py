"""The lazily sorted index behind the engine's running indices keeps the entries and the order
SortedList keeps (the victim search reads it worst-ranked first, policies list running jobs best
first), whatever the sequence of insertions, removals, re-rankings and reads, and whichever way
a read settles the changes (one by one or by a rebuild)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from xirang_service.pool import lazyindex
from xirang_service.pool.lazyindex import LazySortedIndex

#: (priority, level, submitted) rank keys with the job id last: ties broken as the engine's are
ENTRY = st.tuples(st.integers(-2, 0), st.integers(0, 2), st.floats(0, 1e6), st.integers(0, 30))
OPS = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "replace", "read", "last"]), ENTRY), max_size=80
)


@given(OPS, st.sampled_from([0, 4, 10**9]))
def test_it_keeps_the_entries_and_order_sortedlist_keeps(ops: list, share: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lazyindex, "REBUILD_SHARE", share)  # 0: one by one; 10**9: rebuild
        mine, reference = LazySortedIndex(), SortedList()
        for op, entry in ops:
            held = next((e for e in reference if e[-1] == entry[-1]), None)
            if op == "add" and held is None:
                mine.add(entry)
                reference.add(entry)
            elif op == "remove" and held is not None:
                mine.remove(held)
                reference.remove(held)
            elif op == "replace" and held is not None:
                mine.replace(entry)
                reference.remove(held)
                reference.add(entry)
            elif op == "read":
                assert list(mine) == list(reference)
            elif op == "last" and reference:
                assert mine[-1] == reference[-1] and next(reversed(mine)) == reference[-1]
            assert len(mine) == len(reference)
            assert held is None or (held in mine) == (held in reference)
        assert list(mine) == list(reference)
        assert list(reversed(mine)) == list(reversed(reference))


def test_changes_it_cannot_make_raise_and_change_nothing() -> None:
    index = LazySortedIndex()
    index.add((1, 2, 7))
    index.add((0, 1, 3))
    with pytest.raises(ValueError, match="not in index"):
        index.remove((0, 5, 3))  # id 3 holds another entry
    with pytest.raises(ValueError, match="already has an entry"):
        index.add((2, 2, 7))
    with pytest.raises(ValueError, match="has no entry"):
        index.replace((0, 0, 9))
    assert list(index) == [(0, 1, 3), (1, 2, 7)] and len(index) == 2
