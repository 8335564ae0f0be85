"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs and DescribeCluster over the wire."""

from __future__ import annotations

import asyncio
import uuid

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
)
from kafka.protocol.metadata import MetadataRequest

from onceflow.broker.topic_configs import SOURCE_DEFAULT_CONFIG, SOURCE_TOPIC_CONFIG
from onceflow.protocol.errors import ErrorCode

from .raw_client import RawClient, running_broker

C = CreateTopicsRequest


def run(coro):
    return asyncio.run(coro)


def creatable(name, partitions=1, replication=-1, configs=None, assignments=None):
    return C.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication,
        assignments=[
            C.CreatableTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=ids)
            for i, ids in enumerate(assignments or [])
        ],
        configs=[C.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )


def create_request(*topics, validate_only=False):
    return C(topics=list(topics), timeout_ms=5000, validate_only=validate_only)


def test_create_topics_success_and_errors(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, num_partitions=4) as broker:
            client = await RawClient.connect(broker.port)
            response = await client.request(
                create_request(
                    creatable("a", 3, configs={"retention.ms": "1000"}),
                    creatable("b", -1),
                    creatable("bad/name"),
                    creatable("c", 1, replication=3),
                    creatable("d", 0),
                    creatable("e", configs={"no.such.config": "1"}),
                    creatable("f", configs={"retention.ms": "soon"}),
                    creatable("g", -1, assignments=[[0], [0]]),
                    creatable("h", -1, assignments=[[5]]),
                ),
                7,
            )
            codes = {t.name: t.error_code for t in response.topics}
            assert codes == {
                "a": 0,
                "b": 0,
                "bad/name": ErrorCode.INVALID_TOPIC_EXCEPTION,
                "c": ErrorCode.INVALID_REPLICATION_FACTOR,
                "d": ErrorCode.INVALID_PARTITIONS,
                "e": ErrorCode.INVALID_CONFIG,
                "f": ErrorCode.INVALID_CONFIG,
                "g": 0,
                "h": ErrorCode.INVALID_REPLICATION_ASSIGNMENT,
            }
            a = response.topics[0]
            assert a.topic_id == broker.topics.get("a").topic_id and a.num_partitions == 3
            sources = {c.name: (c.value, c.config_source) for c in a.configs}
            assert sources["retention.ms"] == ("1000", SOURCE_TOPIC_CONFIG)
            assert sources["segment.bytes"][1] == SOURCE_DEFAULT_CONFIG
            assert len(broker.topics.get("b").partitions) == 4  # -1: num.partitions
            assert len(broker.topics.get("g").partitions) == 2
            assert sorted(t.name for t in broker.topics) == ["a", "b", "g"]
            # Already exists; older version; validate_only creates nothing.
            response = await client.request(create_request(creatable("a")), 2)
            assert response.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            response = await client.request(create_request(creatable("dry", 2), validate_only=True), 5)
            assert response.topics[0].error_code == 0 and "dry" not in broker.topics
            response = await client.request(create_request(creatable("x"), creatable("x")), 5)
            assert [t.error_code for t in response.topics] == [ErrorCode.INVALID_REQUEST] * 2
            await client.close()

    run(scenario())


def test_delete_topics_by_name_and_id(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            one = broker.topics.create_topic("one", 2)
            broker.topics.create_topic("two", 1)
            client = await RawClient.connect(broker.port)
            response = await client.request(
                DeleteTopicsRequest(topic_names=["two", "missing"], timeout_ms=1000), 5
            )
            assert [(r.name, r.error_code) for r in response.responses] == [
                ("two", 0),
                ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ]
            D = DeleteTopicsRequest.DeleteTopicState
            request = DeleteTopicsRequest(
                topics=[D(name=None, topic_id=one.topic_id), D(name=None, topic_id=uuid.uuid4())],
                timeout_ms=1000,
            )
            response = await client.request(request, 6)
            assert [r.error_code for r in response.responses] == [0, ErrorCode.UNKNOWN_TOPIC_ID]
            assert response.responses[0].name == "one"
            assert list(broker.topics) == []
            assert not (tmp_path / "one-0").exists() and not (tmp_path / "two-0").exists()
            # A recreated topic starts empty with a new id.
            again = broker.topics.create_topic("one", 1)
            assert again.topic_id != one.topic_id
            assert again.partitions[0].log.log_end_offset == 0
            await client.close()
        async with running_broker(tmp_path) as broker:  # deletions persisted
            assert [t.name for t in broker.topics] == ["one"]

    run(scenario())


def test_create_partitions(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 2)
            client = await RawClient.connect(broker.port)
            P = CreatePartitionsRequest.CreatePartitionsTopic

            def request(*topics, validate_only=False):
                return CreatePartitionsRequest(
                    topics=list(topics), timeout_ms=1000, validate_only=validate_only
                )

            response = await client.request(request(P(name="t", count=5, assignments=None)), 3)
            assert response.results[0].error_code == 0
            assert len(broker.topics.get("t").partitions) == 5
            for topic, expected in (
                (P(name="t", count=3, assignments=None), ErrorCode.INVALID_PARTITIONS),
                (P(name="t", count=5, assignments=None), ErrorCode.INVALID_PARTITIONS),
                (P(name="missing", count=3, assignments=None), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ):
                response = await client.request(request(topic), 1)
                assert response.results[0].error_code == expected
            response = await client.request(
                request(P(name="t", count=9, assignments=None), validate_only=True), 0
            )
            assert response.results[0].error_code == 0 and len(broker.topics.get("t").partitions) == 5
            await client.close()
        async with running_broker(tmp_path) as broker:
            assert len(broker.topics.get("t").partitions) == 5

    run(scenario())


def test_create_topics_refuses_more_than_10000_partitions_per_request(tmp_path):
    """Kafka's controller refuses a CreateTopics request that would make more than 10,000 partitions
    in all (POLICY_VIOLATION for every topic in it, validate_only or not) before doing anything: a
    damaged num_partitions must not make the broker create partitions until the disk is full."""

    async def scenario():
        async with running_broker(tmp_path, num_partitions=3) as broker:
            client = await RawClient.connect(broker.port)
            for request in (
                create_request(creatable("huge", 2**31 - 1), validate_only=True),
                create_request(creatable("six-a", 6_000), creatable("six-b", 6_000), validate_only=True),
                # -1 counts as num.partitions (3), as in Kafka: 9,998 + 3 > 10,000
                create_request(creatable("many", 9_998), creatable("default", -1), validate_only=True),
                create_request(creatable("huge", 2**31 - 1), creatable("small", 1)),
            ):
                response = await client.request(request, 7)
                assert [t.error_code for t in response.topics] == [ErrorCode.POLICY_VIOLATION] * len(
                    request.topics
                ), response
                assert "10000" in response.topics[0].error_message
            assert broker.topics.get("huge") is None and broker.topics.get("small") is None
            assert not any(tmp_path.glob("huge-*")) and not any(tmp_path.glob("small-*"))
            # Up to the limit, and invalid counts (which create nothing) do not count.
            response = await client.request(
                create_request(creatable("limit", 10_000), creatable("zero", 0), validate_only=True), 7
            )
            assert [t.error_code for t in response.topics] == [0, ErrorCode.INVALID_PARTITIONS]
            await client.close()

    run(scenario())


def test_create_partitions_refuses_more_than_10000_new_partitions_per_request(tmp_path):
    """The same limit for CreatePartitions: at most 10,000 new partitions in one request."""

    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 2)
            broker.topics.create_topic("u", 1)
            client = await RawClient.connect(broker.port)
            P = CreatePartitionsRequest.CreatePartitionsTopic

            def request(*topics, validate_only=False):
                return CreatePartitionsRequest(
                    topics=list(topics), timeout_ms=1000, validate_only=validate_only
                )

            for topics, validate_only in (
                ([P(name="t", count=2 + 10_001, assignments=None)], True),
                (
                    [P(name="t", count=6_002, assignments=None), P(name="u", count=6_001, assignments=None)],
                    True,
                ),
                (
                    [P(name="t", count=2**31 - 1, assignments=None), P(name="u", count=2, assignments=None)],
                    False,
                ),
            ):
                response = await client.request(request(*topics, validate_only=validate_only), 3)
                assert [r.error_code for r in response.results] == [ErrorCode.POLICY_VIOLATION] * len(topics)
                assert "10000" in response.results[0].error_message
            assert len(broker.topics.get("t").partitions) == 2 and len(broker.topics.get("u").partitions) == 1
            # New partitions count, not the total: t grows by exactly 10,000 (validated only).
            response = await client.request(
                request(P(name="t", count=10_002, assignments=None), validate_only=True), 3
            )
            assert response.results[0].error_code == 0
            await client.close()

    run(scenario())


def test_describe_configs_topic_and_broker(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 1, {"retention.ms": "5000"})
            client = await RawClient.connect(broker.port)
            R = DescribeConfigsRequest.DescribeConfigsResource
            request = DescribeConfigsRequest(
                resources=[
                    R(resource_type=2, resource_name="t", configuration_keys=None),
                    R(resource_type=2, resource_name="t", configuration_keys=["segment.bytes"]),
                    R(resource_type=2, resource_name="missing", configuration_keys=None),
                    R(resource_type=4, resource_name="0", configuration_keys=["num.partitions"]),
                    R(resource_type=4, resource_name="7", configuration_keys=None),
                ],
                include_synonyms=True,
            )
            for version in (1, 4):
                results = (await client.request(request, version)).results
                configs = {c.name: c for c in results[0].configs}
                assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("5000", 1)
                assert [s.source for s in configs["retention.ms"].synonyms] == [1, 5]
                assert (configs["segment.bytes"].value, configs["segment.bytes"].config_source) == (
                    "1073741824",
                    5,
                )
                assert [c.name for c in results[1].configs] == ["segment.bytes"]
                assert results[2].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                assert [(c.name, c.value) for c in results[3].configs] == [("num.partitions", "1")]
                assert results[4].error_code == ErrorCode.INVALID_REQUEST
            await client.close()

    run(scenario())


def test_describe_cluster(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            for version in (0, 1, 2):
                response = await client.request(
                    DescribeClusterRequest(include_cluster_authorized_operations=False), version
                )
                assert response.error_code == 0
                assert response.cluster_id == broker.topics.cluster_id
                assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [
                    (0, "127.0.0.1", broker.port)
                ]
                assert response.authorized_operations is None  # not asked: the -2^31 marker
            response = await client.request(DescribeClusterRequest(endpoint_type=2), 1)
            assert response.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
            response = await client.request(DescribeClusterRequest(endpoint_type=7), 1)
            assert response.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            # No authorizer: every cluster operation (KIP-430's bits: CREATE 5, ALTER 7, DESCRIBE 8,
            # CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12).
            response = await client.request(
                DescribeClusterRequest(include_cluster_authorized_operations=True), 2
            )
            assert response.authorized_operations == {5, 7, 8, 9, 10, 11, 12}
            await client.close()

    run(scenario())


def test_metadata_reports_authorized_operations_when_asked(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            await client.request(create_request(creatable("t", 1)), 5)
            ask = MetadataRequest.MetadataRequestTopic
            for version in (8, 10, 12):
                response = await client.request(
                    MetadataRequest(
                        topics=[ask(name="t"), ask(name="missing")],
                        allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=True,
                        include_topic_authorized_operations=True,
                    ),
                    version,
                )
                # Every topic of the answer, the unknown one too, as Kafka does.
                assert [t.authorized_operations for t in response.topics] == [{3, 4, 5, 6, 7, 8, 10, 11}] * 2
                # The cluster's field exists in v8-10 only (then DescribeCluster has it).
                assert response.authorized_operations == ({5, 7, 8, 9, 10, 11, 12} if version <= 10 else None)
                response = await client.request(MetadataRequest(topics=[ask(name="t")]), version)
                assert response.topics[0].authorized_operations is None
            await client.close()

    run(scenario())
