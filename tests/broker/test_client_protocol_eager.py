"""Eager request starts: a handler runs up to its first real suspension while its request is read, so
one that never suspends is answered with no task and no extra event-loop pass; one that suspends
continues in a task, keeps its place in the answer order and is still cancelled when the peer goes."""

from __future__ import annotations

import asyncio

from tests.broker.test_client_protocol import FakeTransport, feed, frame, make, settle


def test_a_handler_that_never_suspends_is_answered_at_once():
    async def scenario():
        async def dispatch(event):
            return b"a%d" % event.header.correlation_id

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1) + frame(2))
        # No await since the read: the answers are already written.
        assert transport.written == [b"a1", b"a2"]

    asyncio.run(scenario())


def test_a_suspended_handler_keeps_its_place_and_later_eager_answers_wait_for_it():
    async def scenario():
        gate = asyncio.get_running_loop().create_future()

        async def dispatch(event):
            cid = event.header.correlation_id
            if cid == 2:
                value = await gate
                return b"a2-" + value
            return None if cid == 3 else b"a%d" % cid  # 3 answers nothing (acks=0)

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1) + frame(2) + frame(3) + frame(4))
        assert transport.written == [b"a1"]  # 4 is done but must wait behind 2
        gate.set_result(b"x")
        await settle()
        assert transport.written == [b"a1", b"a2-x", b"a4"]

    asyncio.run(scenario())


def test_a_suspended_handler_is_cancelled_when_the_connection_is_lost():
    async def scenario():
        seen: list[str] = []

        async def dispatch(_event):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1))
        protocol.connection_lost(None)
        await settle()
        assert seen == ["cancelled"] and protocol.closed.done()

    asyncio.run(scenario())


def test_a_handler_suspending_twice_gets_each_value():
    async def scenario():
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()

        async def dispatch(_event):
            a = await first
            await asyncio.sleep(0)  # a bare yield to the loop
            b = await second
            return a + b

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1))
        first.set_result(b"p")
        await settle()
        assert transport.written == []
        second.set_result(b"q")
        await settle()
        assert transport.written == [b"pq"]

    asyncio.run(scenario())


def test_an_eager_failure_aborts_after_the_earlier_answers():
    async def scenario():
        gate = asyncio.get_running_loop().create_future()

        async def dispatch(event):
            cid = event.header.correlation_id
            if cid == 1:
                await gate
                return b"a1"
            raise RuntimeError("handler bug")

        transport = FakeTransport()
        protocol = make(dispatch, transport)
        feed(protocol, frame(1) + frame(2))
        assert transport.written == [] and not transport.aborted  # 2 failed, but 1 is owed first
        gate.set_result(None)
        await settle()
        assert transport.written == [b"a1"] and transport.aborted

    asyncio.run(scenario())
