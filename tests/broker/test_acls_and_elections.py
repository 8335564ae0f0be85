"""DescribeAcls/CreateAcls/DeleteAcls (no authorizer: SECURITY_DISABLED) and ElectLeaders (one broker:
ELECTION_NOT_NEEDED) over the wire, at every version we serve, and through real clients' admin APIs."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    ElectLeadersRequest,
)

from onceflow.protocol.errors import ErrorCode

from .raw_client import RawClient, running_broker

ANY, LITERAL, TOPIC, READ, ALLOW = 1, 3, 2, 3, 3


def _describe_filter() -> DescribeAclsRequest:
    return DescribeAclsRequest(
        resource_type_filter=ANY,
        resource_name_filter=None,
        pattern_type_filter=ANY,
        principal_filter=None,
        host_filter=None,
        operation=ANY,
        permission_type=ANY,
    )


def _creation(name: str) -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(
        resource_type=TOPIC,
        resource_name=name,
        resource_pattern_type=LITERAL,
        principal="User:alice",
        host="*",
        operation=READ,
        permission_type=ALLOW,
    )


def _delete_filter(name: str | None) -> DeleteAclsRequest.DeleteAclsFilter:
    return DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=TOPIC,
        resource_name_filter=name,
        pattern_type_filter=LITERAL,
        principal_filter=None,
        host_filter=None,
        operation=ANY,
        permission_type=ANY,
    )


def _elect(topic_partitions, election_type: int = 0) -> ElectLeadersRequest:
    tps = None
    if topic_partitions is not None:
        tps = [ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps) for t, ps in topic_partitions]
    return ElectLeadersRequest(election_type=election_type, topic_partitions=tps, timeout_ms=1000)


def _codes(response) -> dict[tuple[str, int], int]:
    return {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }


def test_acl_apis_answer_security_disabled_at_every_version(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            try:
                for version in (1, 2, 3):
                    described = await client.request(_describe_filter(), version)
                    assert described.error_code == ErrorCode.SECURITY_DISABLED
                    assert described.error_message and described.resources == []

                    created = await client.request(
                        CreateAclsRequest(creations=[_creation("a"), _creation("b")]), version
                    )
                    assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED] * 2

                    deleted = await client.request(
                        DeleteAclsRequest(filters=[_delete_filter("a"), _delete_filter(None)]), version
                    )
                    assert [r.error_code for r in deleted.filter_results] == [ErrorCode.SECURITY_DISABLED] * 2
                    assert all(r.matching_acls == [] for r in deleted.filter_results)
            finally:
                await client.close()

    asyncio.run(scenario())


def test_elect_leaders_is_never_needed_on_one_broker(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 2)
            client = await RawClient.connect(broker.port)
            try:
                wanted = [("t", [0, 1, 7]), ("missing", [0])]
                expected = {
                    ("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
                    ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
                    ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                }
                for version in (0, 1, 2):
                    for election_type in (0, 1) if version else (0,):
                        response = await client.request(_elect(wanted, election_type), version)
                        assert _codes(response) == expected, (version, election_type)
                        if version:
                            assert response.error_code == ErrorCode.NONE

                # Every partition: the ones needing no election are left out, every topic is listed.
                everything = await client.request(_elect(None), 2)
                assert everything.error_code == ErrorCode.NONE
                assert "t" in {r.topic for r in everything.replica_election_results}
                assert _codes(everything) == {}

                unknown_type = await client.request(_elect([("t", [0])], election_type=5), 2)
                assert unknown_type.error_code == ErrorCode.INVALID_REQUEST
                assert _codes(unknown_type) == {("t", 0): ErrorCode.INVALID_REQUEST}
            finally:
                await client.close()

    asyncio.run(scenario())


@pytest.mark.interop
def test_real_clients_see_security_disabled_and_no_election_needed(tmp_path):
    """librdkafka's CreateAcls/DeleteAcls and ElectLeaders, kafka-python's DescribeAcls (librdkafka
    ignores DescribeAcls' top-level error, against Kafka too, and answers an empty list)."""
    from confluent_kafka import ElectionType, KafkaException, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic("t", 1)
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(with_clients, bootstrap)

    def with_clients(bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        binding = AclBinding(
            ResourceType.TOPIC,
            "t",
            ResourcePatternType.LITERAL,
            "User:x",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        with pytest.raises(KafkaException) as created:
            admin.create_acls([binding])[binding].result(15)
        assert created.value.args[0].code() == ErrorCode.SECURITY_DISABLED
        any_acl = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        with pytest.raises(KafkaException) as deleted:
            admin.delete_acls([any_acl])[any_acl].result(15)
        assert deleted.value.args[0].code() == ErrorCode.SECURITY_DISABLED

        elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)]).result(15)
        assert [e.code() for e in elected.values()] == [ErrorCode.ELECTION_NOT_NEEDED]

        kp = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            with pytest.raises(SecurityDisabledError):
                kp.describe_acls(
                    ACLFilter(
                        principal=None,
                        host="*",
                        operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(
                            KpResourceType.TOPIC, None, ACLResourcePatternType.ANY
                        ),
                    )
                )
        finally:
            kp.close()

    asyncio.run(scenario())
