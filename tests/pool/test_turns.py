"""Tenants take turns at the service (xirang_service/web/turns.py): a tenant looping requests
delays another's by one of its requests, never by its whole queue; a tenant alone is never
held back; a turn stuck past its slice lets the next tenant in; a waiter that goes away gives
its place back. The last test drives random arrivals, finishes and departures and checks that
no tenant ever holds more than its seats and that everyone waiting is served in the end."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xirang_service.web.limits import TenantShare
from xirang_service.web.turns import Turns

A, B, C = b"a", b"b", b"c"


def run(body: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(body, 10))


async def tick() -> None:
    while True:
        await asyncio.sleep(0.001)


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_tenant_waiting_goes_before_the_next_request_of_the_tenant_inside() -> None:
    async def body() -> None:
        turns, order = Turns(seats=1, slice_s=60), []
        await turns.enter(A)

        async def ask(tenant: bytes, name: str) -> None:
            await turns.enter(tenant)
            order.append(name)

        tasks = [asyncio.create_task(ask(A, "a2")), asyncio.create_task(ask(A, "a3"))]
        await settle()
        tasks.append(asyncio.create_task(ask(B, "b1")))  # b arrives after a's queue
        await settle()
        assert order == [] and turns.inside == {A: 1}
        turns.leave(A)
        await settle()
        assert order == ["b1"]  # before a's two waiting requests
        turns.leave(B)
        await settle()
        assert order == ["b1", "a2"]
        turns.leave(A)
        await settle()
        assert order == ["b1", "a2", "a3"]
        await asyncio.gather(*tasks)

    run(body())


def test_a_tenant_alone_takes_every_seat_and_a_turn_after_the_other() -> None:
    async def body() -> None:
        turns = Turns(seats=2, slice_s=60)
        await turns.enter(A)
        await turns.enter(A)  # alone: both seats at once
        third = asyncio.create_task(turns.enter(A))
        await settle()
        assert not third.done() and turns.inside == {A: 2}
        turns.leave(A)
        await settle()
        assert third.done() and turns.inside == {A: 2}

    run(body())


def test_another_tenant_waits_for_the_turn_in_progress_not_beside_it() -> None:
    async def body() -> None:
        turns = Turns(seats=2, slice_s=60)
        await turns.enter(A)
        b = asyncio.create_task(turns.enter(B))
        await settle()
        a2 = asyncio.create_task(turns.enter(A))  # a has a seat free, but b waits
        await settle()
        assert not b.done() and not a2.done()
        turns.leave(A)
        await settle()
        assert b.done() and not a2.done() and turns.inside == {B: 1}

    run(body())


@pytest.mark.parametrize("early_s", [0.0, 0.03])
def test_a_turn_past_its_slice_lets_the_next_tenant_in_beside_it(early_s: float) -> None:
    """Also when the loop fires the slice's timer early (asyncio runs a timer up to its
    clock's resolution before it is due): the next tenant is then let in at the next look."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        loop._clock_resolution = early_s or loop._clock_resolution  # type: ignore[attr-defined]
        ticking = asyncio.create_task(tick())  # other work waking the loop meanwhile
        turns = Turns(seats=1, slice_s=0.05)
        await turns.enter(A)  # and never leaves
        began = loop.time()
        await turns.enter(B)
        waited = loop.time() - began
        ticking.cancel()
        assert 0.04 <= waited < 2 and turns.inside == {A: 1, B: 1}

    run(body())


def test_a_waiter_that_goes_away_gives_its_place_back() -> None:
    async def body() -> None:
        turns = Turns(seats=1, slice_s=60)
        await turns.enter(A)
        b = asyncio.create_task(turns.enter(B))
        c = asyncio.create_task(turns.enter(C))
        await settle()
        b.cancel()
        await settle()
        assert list(turns.line) == [C]
        turns.leave(A)
        await settle()
        assert c.done() and turns.inside == {C: 1} and not turns.line

    run(body())


@settings(max_examples=60, deadline=None)
@given(
    seats=st.integers(1, 3),
    steps=st.lists(
        st.tuples(st.sampled_from(["arrive", "finish", "cancel"]), st.sampled_from([A, B, C])),
        max_size=40,
    ),
)
def test_no_tenant_holds_more_than_its_seats_and_every_waiter_is_served(
    seats: int, steps: list[tuple[str, bytes]]
) -> None:
    async def body() -> None:
        turns = Turns(seats=seats, slice_s=60)
        waiting: list[tuple[bytes, asyncio.Task[None]]] = []
        seated: list[bytes] = []

        def collect() -> None:
            for entry in [w for w in waiting if w[1].done()]:
                waiting.remove(entry)
                if not entry[1].cancelled():
                    seated.append(entry[0])

        for action, tenant in steps:
            if action == "arrive":
                waiting.append((tenant, asyncio.create_task(turns.enter(tenant))))
            elif action == "finish" and tenant in seated:
                seated.remove(tenant)
                turns.leave(tenant)
            elif action == "cancel":
                mine = [task for who, task in waiting if who == tenant]
                if mine:
                    mine[0].cancel()
            await settle()
            collect()
            assert all(n <= seats for n in turns.inside.values())
            assert sorted(seated) == sorted(t for t, n in turns.inside.items() for _ in range(n))
        while seated:  # everyone seated finishes: everyone still waiting gets in
            turns.leave(seated.pop(0))
            await settle()
            collect()
        assert not waiting and not turns.line and not turns.inside

    run(body())


def test_a_body_sent_slowly_or_an_answer_read_slowly_holds_nobodys_turn() -> None:
    """The gate reads a request's whole body before seating it, and gives the seat back once
    its answer starts: a tenant dripping its body, or reading its answer slowly, never keeps
    another tenant waiting."""

    async def body() -> None:
        answered: list[bytes] = []
        held = asyncio.Event()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            message = await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": message["body"]})

        gate = TenantShare(app, seats=1)
        drip: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def slow_reader(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                await held.wait()  # a client not reading its answer
                answered.append(message["body"])

        async def reader(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                answered.append(message["body"])

        def scope(token: bytes) -> dict[str, Any]:
            return {"type": "http", "method": "POST", "headers": [(b"authorization", token)]}

        def whole(text: bytes) -> Any:
            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": text, "more_body": False}

            return receive

        dripping = asyncio.create_task(gate(scope(b"Bearer a"), drip.get, reader))
        await drip.put({"type": "http.request", "body": b"half", "more_body": True})
        await settle()
        assert not gate.turns.inside  # its body is not in: not seated
        await gate(scope(b"Bearer b"), whole(b"b"), reader)  # served meanwhile
        slow = asyncio.create_task(gate(scope(b"Bearer c"), whole(b"c"), slow_reader))
        await settle()
        assert not gate.turns.inside  # its answer started: its seat is back
        await gate(scope(b"Bearer b"), whole(b"b2"), reader)  # served meanwhile
        await drip.put({"type": "http.request", "body": b"", "more_body": False})
        await dripping
        held.set()
        await slow
        assert answered == [b"b", b"b2", b"half", b"c"]

    run(body())


def test_a_client_gone_while_sending_its_body_takes_no_turn() -> None:
    """A request whose client disconnects before its body is in is never seated, and the
    application never runs for it."""

    async def body() -> None:
        ran: list[dict[str, Any]] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            ran.append(scope)

        gate = TenantShare(app, seats=1)
        messages = [
            {"type": "http.request", "body": b"half", "more_body": True},
            {"type": "http.disconnect"},
        ]

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError(f"nobody to answer: {message}")

        scope = {"type": "http", "method": "POST", "headers": [(b"authorization", b"Bearer a")]}
        await gate(scope, receive, send)
        assert not ran and not gate.turns.inside and not gate.turns.line

    run(body())


def test_a_tenant_sent_a_costly_answer_lets_others_go_first_for_the_turns_it_owes() -> None:
    """Turns are charged by the bytes answered (a page of a large listing costs as many turns
    as it holds CHARGE_BYTES): a waits behind b's cheap requests until it has paid, then goes."""
    from xirang_service.web.turns import CHARGE_BYTES

    async def body() -> None:
        turns, order = Turns(seats=1, slice_s=60), []
        await turns.enter(C)
        turns.charge(A, 2 * CHARGE_BYTES + 10)  # a's last answer: two turns owed

        async def ask(tenant: bytes, name: str) -> None:
            await turns.enter(tenant)
            order.append(name)

        tasks = [asyncio.create_task(ask(A, "a1"))]
        await settle()
        tasks += [asyncio.create_task(ask(B, f"b{i}")) for i in range(3)]
        await settle()
        turns.leave(C)
        for _ in range(4):
            await settle()
            turns.leave(B if order[-1].startswith("b") else A)
        await asyncio.gather(*tasks)
        assert order == ["b0", "b1", "a1", "b2"]

    run(body())


def test_debts_hold_nobody_back_while_nobody_waits() -> None:
    from xirang_service.web.turns import CHARGE_BYTES

    async def body() -> None:
        turns = Turns(seats=1, slice_s=60)
        turns.charge(A, 50 * CHARGE_BYTES)
        for _ in range(3):
            await turns.enter(A)  # alone: at once, however much it owes
            turns.leave(A)

    run(body())
