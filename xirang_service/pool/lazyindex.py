"""A sorted index that takes changes in O(1) and settles its order when read: the running indices.

The engine keeps the running jobs in sorted indices: all of them (``PoolEngine.running``), and
per project and device type and the borrowed ones per type (what the victim search reads). It
changes them at every start, stop and demotion, and jobs started together cross a service level
together (a burst of arrivals, a restart): thousands of entries move at once, while a pass reads
only the few indices the jobs trying preemption look at, and no pass reads the index of all
running jobs. So a change is only noted, and the order is settled at the next read, in one go:
few changes are applied one by one (a ``bisect`` and a C-level list shift each), many by one
rebuild (the kept entries filtered in order, the new ones sorted and merged in: two ascending
runs, one ``list.sort``). A change that a later one undoes before any read (a demoted job that
stops) costs nothing there. Moving one entry eagerly cost 1-5 us (4 to 5 us in a 5,000-entry
:class:`sortedcontainers.SortedList`), so a burst of 500 demotions cost milliseconds per pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator
from typing import Any

#: a read settles changes one by one while they are under 1/REBUILD_SHARE of the entries, else
#: rebuilds (the share the engine's eager indices rebuilt at, where a move cost about as much as
#: rebuilding four entries; not tuned again, the result is the same either way)
REBUILD_SHARE = 4

Entry = tuple[Any, ...]


class LazySortedIndex:
    """Entries in ascending order, at most one per id (an entry's last item, as in ``(rank, job
    id)``). ``add`` and ``remove`` by value, as :class:`sortedcontainers.SortedList` does, and
    ``replace`` cost a dict operation; iterating, ``reversed`` and indexing see them sorted."""

    __slots__ = ("_fresh", "_live", "_order", "_stale")

    def __init__(self) -> None:
        self._live: dict[Hashable, Entry] = {}  # id -> its entry now
        self._order: list[Entry] = []  # sorted, as of the last read (stale entries included)
        self._fresh: dict[Hashable, Entry] = {}  # live entries added since the last read
        self._stale: list[Entry] = []  # entries of _order removed since the last read

    def add(self, entry: Entry) -> None:
        """Insert ``entry``; a ValueError when its id has one already (remove that first)."""
        ident = entry[-1]
        if ident in self._live:
            raise ValueError(f"{ident!r} already has an entry: {self._live[ident]!r}")
        self._live[ident] = entry
        self._fresh[ident] = entry

    def remove(self, entry: Entry) -> None:
        """Remove ``entry``; a ValueError when it is not there (as SortedList raises)."""
        ident = entry[-1]
        if self._live.get(ident) != entry:
            raise ValueError(f"{entry!r} not in index")
        del self._live[ident]
        if self._fresh.pop(ident, None) is None:  # it was there at the last read
            self._stale.append(entry)

    def replace(self, entry: Entry) -> None:
        """Give ``entry``'s id ``entry`` instead of the one it has (a re-ranked job), in one
        call; a ValueError when the id has none."""
        ident = entry[-1]
        old = self._live.get(ident)
        if old is None:
            raise ValueError(f"{ident!r} has no entry")
        self._live[ident] = entry
        if self._fresh.pop(ident, None) is None:
            self._stale.append(old)
        self._fresh[ident] = entry

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, entry: object) -> bool:
        return isinstance(entry, tuple) and bool(entry) and self._live.get(entry[-1]) == entry

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._settled())

    def __reversed__(self) -> Iterator[Entry]:
        return reversed(self._settled())

    def __getitem__(self, i: int) -> Entry:
        return self._settled()[i]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._settled()!r})"

    def _settled(self) -> list[Entry]:
        """The live entries in order, with the changes since the last read applied."""
        stale, fresh, order = self._stale, self._fresh, self._order
        if not (stale or fresh):
            return order
        if len(stale) * REBUILD_SHARE < len(order):
            for entry in stale:
                del order[bisect.bisect_left(order, entry)]
        elif stale:
            gone = {entry[-1] for entry in stale}
            order[:] = [row for row in order if row[-1] not in gone]
        if len(fresh) * REBUILD_SHARE < len(order):
            for entry in fresh.values():
                bisect.insort_right(order, entry)
        elif fresh:
            order.extend(sorted(fresh.values()))
            order.sort()  # two ascending runs: one merge
        # the same lists and dict from read to read: old containers, which the garbage
        # collector's frequent young-generation passes do not walk (a new 5,000-entry list
        # would be walked by each of them until it aged)
        stale.clear()
        fresh.clear()
        return order
