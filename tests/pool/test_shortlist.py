"""The flat sorted list behind the engine's per-project and per-type running indices keeps the
order SortedList keeps (the victim search reads it worst-ranked first), whatever the sequence
of insertions, removals and bulk rebuilds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from xirang_core.pool.shortlist import ShortSortedList

#: (priority, level, submitted) rank keys with the job id: ties broken as the engine's are
ENTRY = st.tuples(st.integers(-2, 0), st.integers(0, 2), st.floats(0, 1e6), st.integers(0, 50))
OPS = st.lists(st.tuples(st.sampled_from(["add", "remove", "rebuild"]), ENTRY), max_size=60)


@given(OPS)
def test_it_keeps_the_order_and_entries_sortedlist_keeps(ops: list) -> None:
    mine, reference = ShortSortedList(), SortedList()
    for op, entry in ops:
        if op == "add":
            mine.add(entry)
            reference.add(entry)
        elif op == "remove" and entry in reference:
            mine.remove(entry)
            reference.remove(entry)
        elif op == "rebuild":  # what a demotion burst does to an index
            rows = [e for e in mine if e[-1] != entry[-1]]
            mine.clear()
            mine.update(rows)
            reference = SortedList(rows)
        assert list(mine) == list(reference)


def test_removing_an_absent_entry_raises_and_changes_nothing() -> None:
    index = ShortSortedList()
    index.update([(1, 2), (0, 1)])
    with pytest.raises(ValueError, match="not in list"):
        index.remove((0, 5))
    assert index == [(0, 1), (1, 2)]
