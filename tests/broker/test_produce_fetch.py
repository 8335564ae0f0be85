"""Produce, Fetch and ListOffsets over the wire against an in-process broker."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.producer import ProduceRequest

from onceflow.broker import faults
from onceflow.protocol.errors import ErrorCode

from .fake_log import fake_log_opener
from .raw_client import RawClient, build_batch, running_broker

LOG_OPENERS = {"real-log": None, "fake-log": fake_log_opener}  # None: the broker's default, onceflow.log


def run(coro):
    return asyncio.run(coro)


def produce_request(topic: str, batches: dict[int, bytes], acks: int = 1) -> ProduceRequest:
    R = ProduceRequest
    return R(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            R.TopicProduceData(
                name=topic,
                partition_data=[
                    R.TopicProduceData.PartitionProduceData(index=p, records=b) for p, b in batches.items()
                ],
            )
        ],
    )


def fetch_request(
    topic: str,
    offsets: dict[int, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    topic_id=None,
    session_id: int = 0,
    session_epoch: int = -1,
) -> FetchRequest:
    F = FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[
                    F.FetchTopic.FetchPartition(
                        partition=p,
                        fetch_offset=o,
                        partition_max_bytes=partition_max_bytes,
                        log_start_offset=-1,
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets_request(topic: str, timestamp: int, partitions=(0,)) -> ListOffsetsRequest:
    L = ListOffsetsRequest
    return L(
        replica_id=-1,
        isolation_level=0,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[
                    L.ListOffsetsTopic.ListOffsetsPartition(partition_index=p, timestamp=timestamp)
                    for p in partitions
                ],
            )
        ],
    )


def partition_response(response):
    return response.responses[0].partition_responses[0]


def fetched(response, i: int = 0):
    return response.responses[0].partitions[i]


@pytest.fixture(params=list(LOG_OPENERS))
def log_opener(request):
    return LOG_OPENERS[request.param]


def test_produce_then_fetch_round_trip(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            first = build_batch([b"a", b"b", b"c"])
            second = build_batch([b"d"])
            for version, batch, expected_offset in ((9, first, 0), (7, second, 3)):
                response = await client.request(produce_request("t", {0: batch}), version)
                part = partition_response(response)
                assert (part.error_code, part.base_offset) == (0, expected_offset)
            for version in (4, 11, 12):
                response = await client.request(fetch_request("t", {0: 0}), version)
                data = fetched(response)
                assert (data.error_code, data.high_watermark) == (0, 4)
                assert data.log_start_offset == (0 if version >= 5 else -1)  # a v5+ field
                assert len(data.records) == len(first) + len(second)
                assert data.records[:8] == (0).to_bytes(8, "big")
                assert data.records[len(first) : len(first) + 8] == (3).to_bytes(8, "big")
            response = await client.request(fetch_request("t", {0: 4}), 12)
            assert (fetched(response).error_code, fetched(response).records) == (0, b"")
            await client.close()

    run(scenario())


def test_produce_errors(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            good = build_batch([b"x"])
            corrupt = bytearray(good)
            corrupt[-1] ^= 0xFF  # a record byte: CRC no longer matches
            old_magic = bytearray(good)
            old_magic[16] = 1
            cases = [
                (produce_request("t", {0: good}), 2, ErrorCode.UNSUPPORTED_VERSION),
                (produce_request("nope", {0: good}), 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                (produce_request("t", {5: good}), 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                (produce_request("t", {0: bytes(corrupt)}), 9, ErrorCode.CORRUPT_MESSAGE),
                (produce_request("t", {0: bytes(old_magic)}), 9, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
                (produce_request("t", {0: good}, acks=2), 9, ErrorCode.INVALID_REQUIRED_ACKS),
                (produce_request("t", {0: b""}), 9, ErrorCode.INVALID_RECORD),
            ]
            for request, version, expected in cases:
                part = partition_response(await client.request(request, version))
                assert part.error_code == expected, request
                assert part.base_offset == -1
            assert broker.topics.get_partition("t", 0).log.log_end_offset == 0
            await client.close()

    run(scenario())


def test_acks_zero_gets_no_response_and_failure_closes(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            await client.send(
                produce_request("t", {0: build_batch([b"x"])}, acks=0), 9, expect_response=False
            )
            response = await client.request(list_offsets_request("t", -1), 5)
            assert response.topics[0].partitions[0].offset == 1  # the acks=0 batch was appended
            await client.send(
                produce_request("missing", {0: build_batch([b"x"])}, acks=0), 9, expect_response=False
            )
            assert await client.is_closed_by_broker()
            await client.close()

    run(scenario())


def test_fetch_long_poll_is_woken_by_an_append(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            broker.topics.create_topic("t", 1)
            consumer = await RawClient.connect(broker.port)
            producer = await RawClient.connect(broker.port)
            await consumer.send(fetch_request("t", {0: 0}, max_wait_ms=30000, min_bytes=1), 12)
            await asyncio.sleep(0.05)  # let the fetch park (correctness does not depend on it)
            assert (
                partition_response(
                    await producer.request(produce_request("t", {0: build_batch([b"v"])}), 9)
                ).error_code
                == 0
            )
            response = await consumer.receive(timeout=20)
            assert fetched(response).high_watermark == 1
            assert len(fetched(response).records) > 0
            # Nothing arrives: max_wait_ms ends the poll with an empty answer.
            response = await consumer.request(fetch_request("t", {0: 1}, max_wait_ms=20, min_bytes=1), 12)
            assert fetched(response).records == b""
            await consumer.close()
            await producer.close()

    run(scenario())


def test_fetch_limits_ids_and_errors(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            topic = broker.topics.create_topic("t", 2)
            client = await RawClient.connect(broker.port)
            batch = build_batch([b"x" * 500])
            for p in (0, 1):
                await client.request(produce_request("t", {p: batch}), 9)
                await client.request(produce_request("t", {p: batch}), 9)
            # Limits smaller than a batch: the first partition still gets one whole batch, the next none.
            response = await client.request(
                fetch_request("t", {0: 0, 1: 0}, max_bytes=10, partition_max_bytes=10), 12
            )
            assert [len(fetched(response, i).records) for i in (0, 1)] == [len(batch), 0]
            # partition_max_bytes allows one batch per partition.
            response = await client.request(
                fetch_request("t", {0: 0, 1: 0}, partition_max_bytes=len(batch) + 1), 12
            )
            assert [len(fetched(response, i).records) for i in (0, 1)] == [len(batch), len(batch)]
            # Offsets out of range.
            response = await client.request(fetch_request("t", {0: 99}), 12)
            assert fetched(response).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert fetched(response).high_watermark == -1
            # Topic ids (v13+).
            response = await client.request(fetch_request("", {0: 0}, topic_id=topic.topic_id), 13)
            assert response.responses[0].topic_id == topic.topic_id
            assert len(fetched(response).records) == 2 * len(batch)
            import uuid

            response = await client.request(fetch_request("", {0: 0}, topic_id=uuid.uuid4()), 13)
            assert fetched(response).error_code == ErrorCode.UNKNOWN_TOPIC_ID
            # Sessionless (epoch -1) answers carry session id 0; sessions: test_fetch_sessions_wire.py.
            response = await client.request(fetch_request("t", {0: 0}), 12)
            assert (response.error_code, response.session_id) == (0, 0)
            await client.close()

    run(scenario())


def test_list_offsets(tmp_path, log_opener):
    async def scenario():
        async with running_broker(tmp_path, log_opener=log_opener) as broker:
            broker.topics.create_topic("t", 1)
            client = await RawClient.connect(broker.port)
            await client.request(produce_request("t", {0: build_batch([b"a", b"b"])}), 9)
            for version in (1, 5, 8):
                latest = (
                    (await client.request(list_offsets_request("t", -1), version)).topics[0].partitions[0]
                )
                earliest = (
                    (await client.request(list_offsets_request("t", -2), version)).topics[0].partitions[0]
                )
                assert (latest.error_code, latest.offset) == (0, 2)
                assert (earliest.error_code, earliest.offset) == (0, 0)
            missing = (
                (await client.request(list_offsets_request("t", -1, partitions=(3,)), 8))
                .topics[0]
                .partitions[0]
            )
            assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            await client.close()

    run(scenario())


def test_produce_faults(tmp_path, log_opener):
    async def scenario():
        async with running_broker(
            tmp_path, log_opener=log_opener, faults={"delay-response.ms": 10}
        ) as broker:
            broker.topics.create_topic("t", 1)
            plog = broker.topics.get_partition("t", 0).log
            client = await RawClient.connect(broker.port)
            batch = build_batch([b"x"])

            # Faults stay on until a later response proves the produce was handled (faults only
            # apply to Produce, and responses come back in request order).
            broker.faults.set(faults.DROP_REQUEST_BEFORE_APPEND, 1.0)
            await client.send(produce_request("t", {0: batch}), 9, expect_response=False)
            response = await client.request(list_offsets_request("t", -1), 8)
            assert response.topics[0].partitions[0].offset == 0  # ignored: nothing appended, no answer
            broker.faults.clear()

            broker.faults.set(faults.DROP_RESPONSE_AFTER_APPEND, 1.0)
            await client.send(produce_request("t", {0: batch}), 9, expect_response=False)
            response = await client.request(list_offsets_request("t", -1), 8)
            assert response.topics[0].partitions[0].offset == 1  # appended, but never answered
            broker.faults.clear()
            # The dropped response does not wedge the ones after it.
            response = await client.request(produce_request("t", {0: batch}), 9)
            assert partition_response(response).base_offset == 1
            assert plog.log_end_offset == 2

            broker.faults.set(faults.DISCONNECT_AFTER_APPEND, 1.0)
            await client.send(produce_request("t", {0: batch}), 9, expect_response=False)
            assert await client.is_closed_by_broker()
            broker.faults.clear()
            assert plog.log_end_offset == 3  # appended before the connection went
            await client.close()
            client = await RawClient.connect(broker.port)

            broker.faults.set(faults.DELAY_RESPONSE, 1.0)
            response = await client.request(produce_request("t", {0: batch}), 9)
            assert partition_response(response).base_offset == 3
            await client.close()

    run(scenario())
