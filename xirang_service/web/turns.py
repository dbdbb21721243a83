"""Fair turns at the service between tenants: who may run a request in the application now.

A Python service has one interpreter lock, so requests served at once share one core's worth
of time: another tenant's submit that runs beside a tenant's looping reads takes 2-3x as long,
however few seats each tenant gets (measured: 2.7 ms alone, 7.4 ms p99 beside one seat of
reads). So tenants take turns, as a fair-queueing scheduler gives flows turns on a link (and
Kubernetes' API Priority and Fairness gives flows their seats): while tenants wait, the one in
the application finishes what it has in (at most ``seats`` requests) and admits no more; the
next turn goes to the tenant that waited first, in round robin, so a tenant's request waits for
at most one turn of each tenant ahead of it. A tenant alone takes turn after turn (nothing is
held back while nobody waits).

A turn longer than ``slice_s`` (a request waiting on the store or the service's lock, not on
the interpreter) lets the next tenant in beside it, so one slow request delays others by at
most the slice, never by its whole time.

A turn is charged by the work its answers cost, as Kubernetes' API Priority and Fairness
charges a list by the objects it returns: every ``CHARGE_BYTES`` of answer a tenant was sent
costs it one turn more, which it pays by letting the next tenant in line that owes nothing go
first (:meth:`Turns.charge`). A tenant paging through a 30 MB listing then waits a turn per
page's worth of others' cheap requests, rather than the page costing as much as a submit.
Debts matter only while others wait: a tenant alone is never held back.

Everything here runs on the event loop's thread: no locks.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque

#: how long the tenants in the application keep it to themselves while others wait
SLICE_S = 0.02
#: the bytes of answer one turn covers; each further this much costs its tenant a turn
CHARGE_BYTES = 64 * 1024


class Turns:
    """The tenants in the application (each with its requests in) and those waiting, in
    order; :meth:`enter` before a request runs, :meth:`leave` once it has its answer."""

    def __init__(self, seats: int, slice_s: float = SLICE_S) -> None:
        self.seats, self.slice_s = seats, slice_s
        self.inside: dict[bytes, int] = {}
        #: each waiting tenant: since when its first request waits, and its requests' waiters
        self.line: OrderedDict[bytes, tuple[float, deque[asyncio.Future[None]]]] = OrderedDict()
        self._turn: set[bytes] = set()  # the tenants that held the application this turn
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None  # when the armed timer is due (the line's time)
        #: turns each tenant owes for costly answers, paid by letting others go first
        self.debts: dict[bytes, int] = {}

    def charge(self, tenant: bytes, answer_bytes: int) -> None:
        """``tenant`` was sent ``answer_bytes``: every :data:`CHARGE_BYTES` past the first
        costs it a turn."""
        owed = answer_bytes // CHARGE_BYTES
        if owed:
            self.debts[tenant] = self.debts.get(tenant, 0) + owed

    async def enter(self, tenant: bytes) -> None:
        """Return once ``tenant`` may run one request (a seat is then held for it)."""
        if self._may_enter(tenant):
            self._seat(tenant)
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.line.setdefault(tenant, (loop.time(), deque()))[1].append(waiter)
        self._arm()
        try:
            await waiter
        except asyncio.CancelledError:  # the client went away while it waited
            if waiter.done() and not waiter.cancelled():
                self.leave(tenant)  # seated just before: give the seat back
            else:
                self._forget(tenant, waiter)
            raise

    def leave(self, tenant: bytes) -> None:
        """``tenant``'s request has its answer: its seat goes to whoever's turn is next."""
        left = self.inside[tenant] - 1
        if left:
            self.inside[tenant] = left
        else:
            del self.inside[tenant]
        self._dispatch()

    def _may_enter(self, tenant: bytes) -> bool:
        if not self.inside:
            return True
        return 0 < self.inside.get(tenant, 0) < self.seats and not self.line

    def _seat(self, tenant: bytes) -> None:
        if not self.inside:
            self._turn = set()  # a new turn
        self._turn.add(tenant)
        self.inside[tenant] = self.inside.get(tenant, 0) + 1

    def _dispatch(self) -> None:
        """Seat whoever may run now: the next tenant in line when the application is empty
        or it has waited a slice, else the tenants inside their own next requests while
        nobody else waits."""
        following = self._next()
        if following is not None:
            since = self.line[following][0]
            now = asyncio.get_running_loop().time()
            if not self.inside or now - since >= self.slice_s:
                self._admit(following)
        elif self.line:  # only tenants inside wait: they go on
            for tenant in list(self.line):
                self._admit(tenant)
        self._arm()

    def _next(self) -> bytes | None:
        """The tenant whose turn is next: the first in line that has not held the
        application this turn (round robin) and owes no turns, else, once the application is
        empty, the first in line that owes none (those that owe wait a turn), else the first;
        None while only tenants inside this turn wait."""
        ready = [tenant for tenant in self.line if tenant not in self._turn]
        owing_nothing = [tenant for tenant in ready if not self.debts.get(tenant)]
        if owing_nothing or (ready and self.inside):
            return (owing_nothing or ready)[0]
        if self.inside:
            return None
        # a new turn: one that owes turns lets those that owe nothing go first
        free = [tenant for tenant in self.line if not self.debts.get(tenant)]
        return next(iter(free or ready or self.line), None)

    def _admit(self, tenant: bytes) -> None:
        """Seat ``tenant``'s waiting requests up to its seats; those still waiting go to the
        back of the line, waiting anew from now."""
        self._settle(tenant)
        _, waiting = self.line.pop(tenant)
        while waiting and self.inside.get(tenant, 0) < self.seats:
            self._seat(tenant)
            waiting.popleft().set_result(None)
        if waiting:
            self.line[tenant] = (asyncio.get_running_loop().time(), waiting)

    def _settle(self, admitted: bytes) -> None:
        """``admitted`` goes now: each tenant in line owing turns has waited one more, paid;
        one admitted while owing (nobody owing nothing waited) pays a turn too. A tenant alone
        owes nothing (nobody waited for it)."""
        for tenant in [admitted, *(t for t in self.line if t != admitted)]:
            owed = self.debts.get(tenant, 0)
            if owed <= 1:
                self.debts.pop(tenant, None)
            else:
                self.debts[tenant] = owed - 1
        if len(self.line) == 1:
            self.debts.pop(admitted, None)

    def _arm(self) -> None:
        """While a tenant waits beside a turn in progress, look again when it has waited a
        slice (the timer armed already is kept while that moment stays the same)."""
        following = self._next() if self.inside else None
        at = None if following is None else self.line[following][0] + self.slice_s
        if self._timer is not None and at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, at
        if at is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(max(at, loop.time()), self._on_timer)

    def _on_timer(self) -> None:
        """The slice is up (asyncio may fire a timer up to its clock's resolution early: then
        :meth:`_dispatch` admits nobody yet and arms a new one)."""
        self._timer = self._timer_at = None
        self._dispatch()

    def _forget(self, tenant: bytes, waiter: asyncio.Future[None]) -> None:
        _, waiting = self.line.get(tenant, (0.0, deque()))
        if waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del self.line[tenant]
        self._dispatch()
