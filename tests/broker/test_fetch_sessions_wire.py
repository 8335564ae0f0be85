"""Fetch sessions (KIP-227) over the wire, against an in-process broker: raw Fetch requests of every
version we advertise, read_committed in a session, long polls, errors and the cache-size setting."""

from __future__ import annotations

import asyncio
import uuid

from kafka.protocol.consumer import FetchRequest
from tests.broker.raw_client import RawClient, build_batch, running_broker
from tests.transactions import wire

from onceflow.broker.handlers import fetch as fetch_handler
from onceflow.protocol.errors import ErrorCode

from .test_produce_fetch import produce_request

E = ErrorCode
F = FetchRequest


def run(coro):
    return asyncio.run(coro)


def session_fetch(
    partitions: dict[tuple[object, int], int],
    *,
    session_id: int = 0,
    epoch: int = 0,
    forgotten: tuple[tuple[object, int], ...] = (),
    isolation_level: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
) -> FetchRequest:
    """A Fetch of ``{(topic name or topic id, partition): offset}``; a uuid names the topic by id (v13+)."""

    def topic_fields(topic):
        return {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"topic": topic}

    by_topic: dict[object, list] = {}
    for (topic, p), offset in partitions.items():
        by_topic.setdefault(topic, []).append(
            F.FetchTopic.FetchPartition(
                partition=p, fetch_offset=offset, partition_max_bytes=1 << 20, log_start_offset=-1
            )
        )
    forgotten_by_topic: dict[object, list[int]] = {}
    for topic, p in forgotten:
        forgotten_by_topic.setdefault(topic, []).append(p)
    return F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 << 20,
        isolation_level=isolation_level,
        session_id=session_id,
        session_epoch=epoch,
        topics=[F.FetchTopic(partitions=ps, **topic_fields(t)) for t, ps in by_topic.items()],
        forgotten_topics_data=[
            F.ForgottenTopic(partitions=ps, **topic_fields(t)) for t, ps in forgotten_by_topic.items()
        ],
        rack_id="",
    )


def listed(response) -> dict[tuple[object, int], object]:
    """{(topic name, or id from v13, partition): PartitionData} of a response."""
    return {(t.topic or t.topic_id, p.partition_index): p for t in response.responses for p in t.partitions}


async def produce(client: RawClient, topic: str, partition: int, values: list[bytes]) -> None:
    response = await client.request(produce_request(topic, {partition: build_batch(values)}), 9)
    assert response.responses[0].partition_responses[0].error_code == 0


def test_a_session_answers_only_what_changed(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 3)
            stats = broker.services.fetch_sessions.stats
            client = await RawClient.connect(broker.port)
            p0, p1, p2 = ("t", 0), ("t", 1), ("t", 2)
            await produce(client, "t", 0, [b"a", b"b"])

            full = await client.request(session_fetch({p0: 0, p1: 0, p2: 0}), 12)
            session = full.session_id
            assert full.error_code == 0 and session != 0
            assert list(listed(full)) == [p0, p1, p2]  # a full answer lists every partition
            assert listed(full)[p0].high_watermark == 2 and listed(full)[p0].records

            # The client moved on in p0 (so it names it); nothing is new anywhere: an empty answer.
            inc = await client.request(session_fetch({p0: 2}, session_id=session, epoch=1), 12)
            assert (inc.error_code, inc.session_id, inc.responses) == (0, session, [])

            await produce(client, "t", 2, [b"c"])
            inc = await client.request(session_fetch({}, session_id=session, epoch=2), 12)
            assert list(listed(inc)) == [p2]  # p2 read at its cached offset 0: the new record
            assert listed(inc)[p2].high_watermark == 1 and listed(inc)[p2].records

            # Forget p1: it leaves the session, and what arrives there is no longer read.
            inc = await client.request(
                session_fetch({p2: 1}, session_id=session, epoch=3, forgotten=(p1,)), 12
            )
            assert inc.responses == []
            await produce(client, "t", 1, [b"d"])
            inc = await client.request(session_fetch({}, session_id=session, epoch=4), 12)
            assert inc.responses == []
            assert list(broker.services.fetch_sessions.get(session).partitions) == [p0, p2]
            # Adding it back lists it in the next answer, whatever it holds.
            inc = await client.request(session_fetch({p1: 1}, session_id=session, epoch=5), 12)
            assert list(listed(inc)) == [p1] and not listed(inc)[p1].records
            assert (stats.full_fetches, stats.incremental_fetches, stats.sessions_created) == (1, 5, 1)
            await client.close()

    run(scenario())


def test_incremental_long_poll_is_woken_by_an_append_to_an_implied_partition(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 2)
            consumer = await RawClient.connect(broker.port)
            producer = await RawClient.connect(broker.port)
            full = await consumer.request(session_fetch({("t", 0): 0, ("t", 1): 0}), 12)
            session = full.session_id
            await consumer.send(
                session_fetch({}, session_id=session, epoch=1, max_wait_ms=30_000, min_bytes=1), 12
            )
            await asyncio.sleep(0.05)  # let the fetch park (correctness does not depend on it)
            await produce(producer, "t", 1, [b"late"])
            inc = await consumer.receive(timeout=20)
            assert list(listed(inc)) == [("t", 1)]
            assert listed(inc)[("t", 1)].records
            # Nothing new: the poll ends at max_wait_ms with an empty incremental answer.
            inc = await consumer.request(
                session_fetch({("t", 1): 1}, session_id=session, epoch=2, max_wait_ms=20, min_bytes=1), 12
            )
            assert (inc.error_code, inc.session_id, inc.responses) == (0, session, [])
            await consumer.close()
            await producer.close()

    run(scenario())


def test_read_committed_in_a_session_answers_as_a_full_fetch_would(tmp_path):
    """At every step the partitions an incremental read_committed answer lists carry exactly what a
    sessionless fetch at the same offsets returns (records, LSO, aborted transactions), and a
    partition left out has nothing to say."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            topic = "txn-s"
            broker.topics.create_topic(topic, 2)
            client = await RawClient.connect(broker.port)
            init = await client.request(wire.init_producer_id("tid-s"), 4)
            pid, epoch = init.producer_id, init.producer_epoch
            offsets = {(topic, 0): 0, (topic, 1): 0}
            full = await client.request(session_fetch(offsets, isolation_level=1), 12)
            session, session_epoch = full.session_id, 1
            seen = {
                key: (p.high_watermark, p.last_stable_offset, p.log_start_offset)
                for key, p in listed(full).items()
            }

            async def step():
                nonlocal session_epoch
                inc = await client.request(
                    session_fetch({}, session_id=session, epoch=session_epoch, isolation_level=1), 12
                )
                session_epoch += 1
                assert inc.error_code == 0 and inc.session_id == session
                sessionless = await client.request(session_fetch(offsets, epoch=-1, isolation_level=1), 12)
                assert sessionless.session_id == 0
                expected = listed(sessionless)
                got = listed(inc)
                for key, data in expected.items():
                    state = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
                    if key in got:
                        assert got[key].to_dict() == data.to_dict()
                        seen[key] = state
                    else:  # left out: it must have had nothing to say
                        assert not data.records and not data.aborted_transactions and state == seen[key]
                return got

            async def txn_records(values, seq):
                await client.request(wire.add_partitions("tid-s", pid, epoch, {topic: [0]}), 3)
                r = await client.request(
                    wire.produce(topic, 0, wire.txn_batch(values, pid, epoch, seq), "tid-s"), 9
                )
                assert r.responses[0].partition_responses[0].error_code == 0

            await txn_records([b"x", b"y"], 0)  # open: the HW moves, the LSO does not
            got = await step()
            assert list(got) == [(topic, 0)] and not got[(topic, 0)].records
            assert (got[(topic, 0)].high_watermark, got[(topic, 0)].last_stable_offset) == (2, 0)
            assert (await client.request(wire.end_txn("tid-s", pid, epoch, False), 3)).error_code == 0
            await asyncio.sleep(0)  # the markers are written in a task scheduled before the answer
            got = await step()  # aborted: the records, the marker and the aborted transaction
            assert [(a.producer_id, a.first_offset) for a in got[(topic, 0)].aborted_transactions] == [
                (pid, 0)
            ]
            assert got[(topic, 0)].last_stable_offset == 3
            # The session's cached offset is still 0: the same answer again, aborted list included.
            got = await step()
            assert [(a.producer_id, a.first_offset) for a in got[(topic, 0)].aborted_transactions] == [
                (pid, 0)
            ]
            # The client moves to offset 3; a committed transaction follows on p0, plain records on p1.
            offsets[(topic, 0)] = 3
            inc = await client.request(
                session_fetch({(topic, 0): 3}, session_id=session, epoch=session_epoch, isolation_level=1), 12
            )
            session_epoch += 1
            assert inc.responses == []
            await txn_records([b"z"], 2)
            await produce(client, topic, 1, [b"plain"])
            got = await step()
            assert set(got) == {(topic, 0), (topic, 1)} and got[(topic, 1)].records
            assert (await client.request(wire.end_txn("tid-s", pid, epoch, True), 3)).error_code == 0
            await asyncio.sleep(0)
            got = await step()
            assert got[(topic, 0)].records and got[(topic, 0)].aborted_transactions == []
            await client.close()

    run(scenario())


def test_sessions_by_topic_id(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            unknown = uuid.uuid4()
            client = await RawClient.connect(broker.port)
            for version in (13, 15, 17):
                name = f"ids-{version}"
                tid = broker.topics.create_topic(name, 2).topic_id
                await produce(client, name, 0, [b"a"])
                full = await client.request(
                    session_fetch({(tid, 0): 0, (tid, 1): 0, (unknown, 0): 0}), version
                )
                session = full.session_id
                assert session != 0
                assert [(k, p.error_code) for k, p in listed(full).items()] == [
                    ((tid, 0), 0),
                    ((tid, 1), 0),
                    ((unknown, 0), E.UNKNOWN_TOPIC_ID),
                ]
                # The unknown topic's partition is an error: listed every time, like any error.
                inc = await client.request(session_fetch({(tid, 0): 1}, session_id=session, epoch=1), version)
                assert [(k, p.error_code) for k, p in listed(inc).items()] == [
                    ((unknown, 0), E.UNKNOWN_TOPIC_ID)
                ]
                inc = await client.request(
                    session_fetch({}, session_id=session, epoch=2, forgotten=((unknown, 0),)), version
                )
                assert inc.error_code == 0 and inc.responses == []
                await produce(client, name, 1, [b"b"])
                inc = await client.request(session_fetch({}, session_id=session, epoch=3), version)
                assert list(listed(inc)) == [(tid, 1)]
                # A session of topic ids cannot go on with a request naming topics (v12), nor the reverse.
                wrong = await client.request(session_fetch({}, session_id=session, epoch=4), 12)
                assert (wrong.error_code, wrong.session_id, wrong.responses) == (
                    E.FETCH_SESSION_TOPIC_ID_ERROR,
                    0,
                    [],
                )
                by_name = (await client.request(session_fetch({(name, 0): 0}), 12)).session_id
                wrong = await client.request(session_fetch({}, session_id=by_name, epoch=1), version)
                assert wrong.error_code == E.FETCH_SESSION_TOPIC_ID_ERROR
            await client.close()

    run(scenario())


def test_session_errors_answer_at_once_without_partitions(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            session = (await client.request(session_fetch({("t", 0): 0}), 12)).session_id
            cases = [
                (session_fetch({("t", 0): 0}, session_id=session + 1, epoch=1), E.FETCH_SESSION_ID_NOT_FOUND),
                (session_fetch({("t", 0): 0}, session_id=0, epoch=1), E.FETCH_SESSION_ID_NOT_FOUND),
                (session_fetch({("t", 0): 0}, session_id=session, epoch=7), E.INVALID_FETCH_SESSION_EPOCH),
            ]
            for request, error in cases:
                # max_wait_ms would hold a fetch that reads something: errors are answered at once.
                request.max_wait_ms, request.min_bytes = 60_000, 1
                response = await client.request(request, 12, timeout=10)
                assert (response.error_code, response.session_id, response.responses) == (error, 0, [])
            # The session is untouched by those; a full fetch at epoch -1 naming it closes it.
            assert (await client.request(session_fetch({}, session_id=session, epoch=1), 12)).error_code == 0
            closed = await client.request(session_fetch({("t", 0): 0}, session_id=session, epoch=-1), 12)
            assert (closed.error_code, closed.session_id, list(listed(closed))) == (0, 0, [("t", 0)])
            gone = await client.request(session_fetch({}, session_id=session, epoch=2), 12)
            assert gone.error_code == E.FETCH_SESSION_ID_NOT_FOUND
            await client.close()

    run(scenario())


def test_every_advertised_fetch_version_serves_full_and_incremental_fetches(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            topic = broker.topics.create_topic("v", 1)
            client = await RawClient.connect(broker.port)
            await produce(client, "v", 0, [b"one", b"two"])
            for version in range(fetch_handler.MIN_VERSION, fetch_handler.MAX_VERSION + 1):
                key = (topic.topic_id if version >= 13 else "v", 0)
                full = await client.request(session_fetch({key: 0}), version)
                data = listed(full)[key]
                assert (data.error_code, data.high_watermark) == (0, 2) and data.records, version
                if version < 7:  # no session fields: always sessionless
                    continue
                assert full.session_id != 0, version
                inc = await client.request(
                    session_fetch({key: 2}, session_id=full.session_id, epoch=1), version
                )
                assert (inc.error_code, inc.session_id, inc.responses) == (0, full.session_id, []), version
            await client.close()

    run(scenario())


def test_no_cache_slots_means_sessionless_answers(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, max_incremental_fetch_session_cache_slots=0) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            full = await client.request(session_fetch({("t", 0): 0}), 12)
            assert (full.error_code, full.session_id, list(listed(full))) == (0, 0, [("t", 0)])
            assert len(broker.services.fetch_sessions) == 0
            await client.close()

    run(scenario())


def test_a_partition_named_twice_is_answered_once(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 2)
            client = await RawClient.connect(broker.port)
            await produce(client, "t", 0, [b"a"])
            request = session_fetch({("t", 0): 0, ("t", 1): 0})
            request.topics.append(session_fetch({("t", 0): 1}).topics[0])  # p0 again, at another offset
            response = await client.request(request, 12)
            assert [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses] == [
                ("t", [0, 1])
            ]
            # As in Kafka's request map, the last mention's data wins (offset 1: nothing to read).
            assert listed(response)[("t", 0)].records == b""
            await client.close()

    run(scenario())
