"""The in-process broker over real sockets: ApiVersions, Metadata, pipelining, bad input, persistence."""

from __future__ import annotations

import asyncio
import struct

from kafka.protocol.admin.groups import ListGroupsRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

from onceflow.broker.handlers import HANDLERS
from onceflow.protocol.errors import ErrorCode

from .raw_client import RawClient, running_broker


def run(coro):
    return asyncio.run(coro)


def metadata_request(*names: str, auto_create: bool = True) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=auto_create,
    )


def test_api_versions_advertises_exactly_the_handlers(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            for version in (0, 3, 4):
                response = await client.request(ApiVersionsRequest(), version)
                assert response.error_code == 0
                advertised = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
                assert advertised == {(h.API_KEY, h.MIN_VERSION, h.MAX_VERSION) for h in HANDLERS}
            await client.close()

    run(scenario())


def test_api_versions_above_max_gets_v0_body_with_unsupported_version(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            body = struct.pack(">hhih", 18, 99, 1234, -1) + b"\x00\x00"
            await client.send_raw(struct.pack(">i", len(body)) + body)
            frame = await client.read_frame()
            response = ApiVersionsResponse.decode(frame, version=99 % 5, header=True)  # body is v0 anyway
            assert response.header.correlation_id == 1234
            assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
            assert [(k.api_key, k.max_version) for k in response.api_keys] == [(18, 4)]
            # The connection stays usable: the client retries at a version we speak.
            assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0
            await client.close()

    run(scenario())


def test_metadata_lists_broker_and_auto_creates(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, num_partitions=3) as broker:
            client = await RawClient.connect(broker.port)
            response = await client.request(metadata_request("auto-1"), 12)
            assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", broker.port)]
            assert response.controller_id == 0
            assert response.cluster_id == broker.topics.cluster_id
            (topic,) = response.topics
            assert (topic.error_code, topic.name) == (0, "auto-1")
            assert topic.topic_id == broker.topics.get("auto-1").topic_id
            assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
            assert all(p.leader_id == 0 and p.isr_nodes == [0] for p in topic.partitions)
            # Not allowed by the request: no creation.
            response = await client.request(metadata_request("other", auto_create=False), 12)
            assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert "other" not in broker.topics
            # All topics (null list, v1+) and v0's empty list.
            response = await client.request(MetadataRequest(topics=None), 12)
            assert [t.name for t in response.topics] == ["auto-1"]
            response = await client.request(MetadataRequest(topics=[]), 0)
            assert [t.name for t in response.topics] == ["auto-1"]
            # By topic id (v12+).
            request = MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic.topic_id)]
            )
            response = await client.request(request, 12)
            assert response.topics[0].name == "auto-1"
            await client.close()

    run(scenario())


def test_metadata_auto_create_disabled_by_broker_config(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, auto_create_topics_enable=False) as b:
            client = await RawClient.connect(b.port)
            response = await client.request(metadata_request("nope"), 5)
            assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            await client.close()

    run(scenario())


def test_metadata_invalid_topic_names(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            names = ["bad name", "..", ".", "x" * 250, "ü"]
            response = await client.request(metadata_request(*names), 9)
            assert [t.error_code for t in response.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * len(names)
            assert list(broker.topics) == []
            await client.close()

    run(scenario())


def test_pipelined_requests_are_answered_in_order(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            sent = []
            for i in range(30):
                if i % 2:
                    sent.append(await client.send(ApiVersionsRequest(), i % 5))
                else:
                    sent.append(await client.send(metadata_request(f"t{i}"), 1 + i % 13))
            received = [(await client.receive()).header.correlation_id for _ in sent]
            assert received == sent
            await client.close()

    run(scenario())


def test_bad_frames_close_only_their_connection(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, socket_request_max_bytes=1000) as b:
            good = await RawClient.connect(b.port)
            bad_inputs = [
                struct.pack(">i", 1001),  # oversized
                struct.pack(">i", -5),  # negative size
                struct.pack(">i", 10) + struct.pack(">hhih", 9999, 0, 1, -1),  # unknown API key
                struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1),  # unsupported version
                struct.pack(">i", 12) + b"\x00\x03\x00\x0c" + b"\xff" * 8,  # garbage body
            ]
            for data in bad_inputs:
                bad = await RawClient.connect(b.port)
                await bad.send_raw(data)
                assert await bad.is_closed_by_broker()
                await bad.close()
                assert (await good.request(ApiVersionsRequest(), 3)).error_code == 0
            # A truncated frame followed by the peer vanishing does not disturb anyone either.
            bad = await RawClient.connect(b.port)
            await bad.send_raw(struct.pack(">i", 500) + b"\x00\x12")
            await bad.close()
            assert (await good.request(metadata_request("still-fine"), 12)).topics[0].error_code == 0
            await good.close()

    run(scenario())


def test_a_null_in_a_string_array_closes_the_connection_without_a_handler_crash(tmp_path, caplog):
    """ListGroups v5 whose types filter holds a null string (the fuzzer's find): Kafka cannot parse
    it and closes the connection; ours did too, but only after the handler crashed on the None."""

    async def scenario():
        async with running_broker(tmp_path) as b:
            bad = await RawClient.connect(b.port)
            await bad.send(ListGroupsRequest(states_filter=[], types_filter=["classic", None]), 5)
            assert await bad.is_closed_by_broker()
            await bad.close()
            good = await RawClient.connect(b.port)
            response = await good.request(ListGroupsRequest(states_filter=[], types_filter=["classic"]), 5)
            assert response.error_code == 0
            await good.close()

    with caplog.at_level("WARNING", logger="onceflow"):
        run(scenario())
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert "types_filter has a null element" in caplog.text


def test_topics_and_cluster_id_survive_restart(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, num_partitions=2) as broker:
            client = await RawClient.connect(broker.port)
            await client.request(metadata_request("kept"), 12)
            await client.close()
            topic_id = broker.topics.get("kept").topic_id
            cluster_id = broker.topics.cluster_id
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            response = await client.request(metadata_request("kept", auto_create=False), 12)
            (topic,) = response.topics
            assert (topic.error_code, topic.topic_id, len(topic.partitions)) == (0, topic_id, 2)
            assert response.cluster_id == cluster_id
            await client.close()

    run(scenario())


def test_many_concurrent_connections_each_get_their_own_answers(tmp_path):
    async def one_client(port: int, n: int) -> list[int]:
        client = await RawClient.connect(port)
        sent = [await client.send(metadata_request(f"c{n}"), 12) for _ in range(5)]
        received = []
        for _ in sent:
            response = await client.receive()
            assert response.topics[0].name == f"c{n}"
            received.append(response.header.correlation_id)
        await client.close()
        return received == sent

    async def scenario():
        async with running_broker(tmp_path) as broker:
            results = await asyncio.gather(*(one_client(broker.port, n) for n in range(40)))
            assert all(results)
            assert len(list(broker.topics)) == 40

    run(scenario())


def test_a_client_that_does_not_read_gets_backpressure_not_lost_responses(tmp_path):
    from .raw_client import build_batch
    from .test_produce_fetch import fetch_request, produce_request

    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("bp", 1)
            client = await RawClient.connect(broker.port)
            batch = build_batch([b"x" * 100_000])
            assert (await client.request(produce_request("bp", {0: batch}), 9)).responses[
                0
            ].partition_responses[0].error_code == 0
            # ~70 MB of responses (more than socket buffers) from more requests than the
            # per-connection queue holds, while reading nothing: the broker stops reading once its
            # queue and the socket buffers fill, then resumes as we read, in order, losing nothing.
            count = 700

            async def send_all():
                return [await client.send(fetch_request("bp", {0: 0}), 12) for _ in range(count)]

            sender = asyncio.create_task(send_all())
            await asyncio.sleep(0.2)  # let the buffers fill; the result does not depend on it
            received = []
            for _ in range(count):
                response = await client.receive(timeout=30)
                assert len(response.responses[0].partitions[0].records) == len(batch)
                received.append(response.header.correlation_id)
            assert received == await sender
            await client.close()

    run(scenario())
