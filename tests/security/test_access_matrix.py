"""Every API the broker serves, sent three ways that must all be refused, with nothing changed:

1. unauthenticated, on a SASL listener: the broker closes the connection without an answer (Kafka's
   SaslServerAuthenticator), whatever the request;
2. after a wrong password: SaslAuthenticate fails with SASL_AUTHENTICATION_FAILED, and a request sent
   right behind it in the same write is neither answered nor run;
3. authenticated as a principal with no ACL: the API answers with the error Kafka's broker gives
   (``security.api_access.API_ACCESS``), or leaves out what the principal may not see.

"Nothing changed" is checked by the administrator (a super user) before and after: topics, their
configs, partitions and log ends, groups and their offsets, transactions, ACLs, SCRAM users, quotas.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import scramp
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeQuorumRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest
from tests.broker.raw_client import RawClient, build_batch

from onceflow.broker.handlers import HANDLERS
from onceflow.broker.security.api_access import API_ACCESS
from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.admin_security import AclBinding
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType
from onceflow.protocol.errors import ErrorCode as E
from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

pytestmark = pytest.mark.timeout(240)

TOPIC, GROUP, TXN = "matrix-topic", "matrix-group", "matrix-tx"
NEW_TOPIC = "matrix-new"


def requests() -> dict[str, tuple]:
    """name -> (request, version, expected): ``expected`` is the error code the refused principal
    gets, or a function checking a filtered answer."""
    batch = build_batch([b"intruder"])
    t = TOPIC
    return {
        "Produce": (
            ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=t,
                        partition_data=[
                            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)
                        ],
                    )
                ],
            ),
            9,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "Fetch": (
            FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=t,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            ),
            12,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "ListOffsets": (
            ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=t,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=0, timestamp=-1
                            )
                        ],
                    )
                ],
            ),
            7,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "OffsetForLeaderEpoch": (
            OffsetForLeaderEpochRequest(
                replica_id=-1,
                topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                        topic=t,
                        partitions=[
                            OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                                partition=0, current_leader_epoch=-1, leader_epoch=0
                            )
                        ],
                    )
                ],
            ),
            4,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "Metadata (named)": (
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=t)], allow_auto_topic_creation=True
            ),
            12,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "Metadata (auto-create)": (
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=NEW_TOPIC)], allow_auto_topic_creation=True
            ),
            12,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "Metadata (all)": (
            MetadataRequest(topics=None, allow_auto_topic_creation=True),
            12,
            lambda r: r.topics == [],
        ),
        "OffsetCommit": (
            OffsetCommitRequest(
                group_id=GROUP,
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=t,
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=0, committed_metadata=""
                            )
                        ],
                    )
                ],
            ),
            8,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "OffsetFetch": (
            OffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=GROUP, topics=None)],
                require_stable=False,
            ),
            8,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "FindCoordinator (group)": (
            FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP]),
            4,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "FindCoordinator (txn)": (
            FindCoordinatorRequest(key_type=1, coordinator_keys=[TXN]),
            4,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "JoinGroup": (
            JoinGroupRequest(
                group_id=GROUP,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            7,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "Heartbeat": (
            HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="m"),
            4,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "LeaveGroup": (
            LeaveGroupRequest(group_id=GROUP, members=[LeaveGroupRequest.MemberIdentity(member_id="m")]),
            4,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "SyncGroup": (
            SyncGroupRequest(group_id=GROUP, generation_id=1, member_id="m", assignments=[]),
            4,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "DescribeGroups": (DescribeGroupsRequest(groups=[GROUP]), 5, E.GROUP_AUTHORIZATION_FAILED),
        "ListGroups": (ListGroupsRequest(), 4, lambda r: r.groups == []),
        "SaslHandshake": (SaslHandshakeRequest(mechanism="PLAIN"), 1, E.ILLEGAL_SASL_STATE),
        "ApiVersions": (ApiVersionsRequest(client_software_name="m", client_software_version="1"), 3, E.NONE),
        "CreateTopics": (
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name=NEW_TOPIC, num_partitions=1, replication_factor=-1, assignments=[], configs=[]
                    )
                ],
                timeout_ms=5000,
                validate_only=False,
            ),
            5,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DeleteTopics": (
            DeleteTopicsRequest(topic_names=[t], timeout_ms=5000),
            4,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DeleteRecords": (
            DeleteRecordsRequest(
                topics=[
                    DeleteRecordsRequest.DeleteRecordsTopic(
                        name=t,
                        partitions=[
                            DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                                partition_index=0, offset=-1
                            )
                        ],
                    )
                ],
                timeout_ms=5000,
            ),
            2,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "InitProducerId (transactional)": (
            InitProducerIdRequest(
                transactional_id=TXN, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
            ),
            4,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "InitProducerId (idempotent)": (
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
            ),
            4,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "AddPartitionsToTxn (client)": (
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TXN,
                v3_and_below_producer_id=0,
                v3_and_below_producer_epoch=0,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[0])
                ],
            ),
            3,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "AddPartitionsToTxn (broker)": (
            AddPartitionsToTxnRequest(
                transactions=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                        transactional_id=TXN,
                        producer_id=0,
                        producer_epoch=0,
                        verify_only=False,
                        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[0])],
                    )
                ]
            ),
            4,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "AddOffsetsToTxn": (
            AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=0, producer_epoch=0, group_id=GROUP),
            3,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "EndTxn": (
            EndTxnRequest(transactional_id=TXN, producer_id=0, producer_epoch=0, committed=False),
            3,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "WriteTxnMarkers": (
            WriteTxnMarkersRequest(
                markers=[
                    WriteTxnMarkersRequest.WritableTxnMarker(
                        producer_id=0,
                        producer_epoch=0,
                        transaction_result=False,
                        topics=[
                            WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                                name=t, partition_indexes=[0]
                            )
                        ],
                        coordinator_epoch=0,
                    )
                ]
            ),
            1,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "TxnOffsetCommit": (
            TxnOffsetCommitRequest(
                transactional_id=TXN,
                group_id=GROUP,
                producer_id=0,
                producer_epoch=0,
                generation_id=-1,
                member_id="",
                topics=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                        name=t,
                        partitions=[
                            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=0, committed_metadata=""
                            )
                        ],
                    )
                ],
            ),
            3,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "DescribeAcls": (
            DescribeAclsRequest(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
            2,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "CreateAcls": (
            CreateAclsRequest(
                creations=[
                    CreateAclsRequest.AclCreation(
                        resource_type=4,
                        resource_name="kafka-cluster",
                        resource_pattern_type=3,
                        principal="User:bob",
                        host="*",
                        operation=2,
                        permission_type=3,
                    )
                ]
            ),
            2,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "DeleteAcls": (
            DeleteAclsRequest(
                filters=[
                    DeleteAclsRequest.DeleteAclsFilter(
                        resource_type_filter=1,
                        resource_name_filter=None,
                        pattern_type_filter=1,
                        principal_filter=None,
                        host_filter=None,
                        operation=1,
                        permission_type=1,
                    )
                ]
            ),
            2,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "DescribeConfigs (topic)": (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=t, configuration_keys=None
                    )
                ]
            ),
            2,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DescribeConfigs (broker)": (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=4, resource_name="0", configuration_keys=None
                    )
                ]
            ),
            2,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "AlterConfigs": (
            AlterConfigsRequest(
                resources=[
                    AlterConfigsRequest.AlterConfigsResource(
                        resource_type=2,
                        resource_name=t,
                        configs=[
                            AlterConfigsRequest.AlterConfigsResource.AlterableConfig(
                                name="retention.ms", value="1"
                            )
                        ],
                    )
                ],
                validate_only=False,
            ),
            1,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DescribeLogDirs": (DescribeLogDirsRequest(topics=None), 4, E.CLUSTER_AUTHORIZATION_FAILED),
        "SaslAuthenticate": (SaslAuthenticateRequest(auth_bytes=b"\x00bob\x00x"), 2, E.ILLEGAL_SASL_STATE),
        "CreatePartitions": (
            CreatePartitionsRequest(
                topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=t, count=5, assignments=None)],
                timeout_ms=5000,
                validate_only=False,
            ),
            2,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DeleteGroups": (DeleteGroupsRequest(groups_names=[GROUP]), 2, E.GROUP_AUTHORIZATION_FAILED),
        "ElectLeaders": (
            ElectLeadersRequest(
                election_type=0,
                topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=t, partitions=[0])],
                timeout_ms=5000,
            ),
            2,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "IncrementalAlterConfigs": (
            IncrementalAlterConfigsRequest(
                resources=[
                    IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=2,
                        resource_name=t,
                        configs=[
                            IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
                                name="retention.ms", config_operation=0, value="1"
                            )
                        ],
                    )
                ],
                validate_only=False,
            ),
            1,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "OffsetDelete": (
            OffsetDeleteRequest(
                group_id=GROUP,
                topics=[
                    OffsetDeleteRequest.OffsetDeleteRequestTopic(
                        name=t,
                        partitions=[
                            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                                partition_index=0
                            )
                        ],
                    )
                ],
            ),
            0,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "DescribeClientQuotas": (
            DescribeClientQuotasRequest(components=[], strict=False),
            1,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "AlterClientQuotas": (
            AlterClientQuotasRequest(
                entries=[
                    AlterClientQuotasRequest.EntryData(
                        entity=[
                            AlterClientQuotasRequest.EntryData.EntityData(
                                entity_type="user", entity_name="bob"
                            )
                        ],
                        ops=[
                            AlterClientQuotasRequest.EntryData.OpData(
                                key="producer_byte_rate", value=1.0, remove=False
                            )
                        ],
                    )
                ],
                validate_only=False,
            ),
            1,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "DescribeUserScramCredentials": (
            DescribeUserScramCredentialsRequest(users=None),
            0,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "AlterUserScramCredentials": (
            AlterUserScramCredentialsRequest(
                deletions=[
                    AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="admin", mechanism=2)
                ],
                upsertions=[],
            ),
            0,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "DescribeQuorum": (
            DescribeQuorumRequest(
                topics=[
                    DescribeQuorumRequest.TopicData(
                        topic_name="__cluster_metadata",
                        partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)],
                    )
                ]
            ),
            0,
            E.CLUSTER_AUTHORIZATION_FAILED,
        ),
        "DescribeCluster": (
            DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1),
            1,
            lambda r: r.error_code == 0 and not r.authorized_operations,
        ),
        "DescribeProducers": (
            DescribeProducersRequest(
                topics=[DescribeProducersRequest.TopicRequest(name=t, partition_indexes=[0])]
            ),
            0,
            E.TOPIC_AUTHORIZATION_FAILED,
        ),
        "DescribeTransactions": (
            DescribeTransactionsRequest(transactional_ids=[TXN]),
            0,
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        "ListTransactions": (
            ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1),
            1,
            lambda r: r.error_code == 0 and r.transaction_states == [],
        ),
        "ConsumerGroupHeartbeat": (
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=uuid.uuid4().hex,
                member_epoch=0,
                instance_id=None,
                rack_id=None,
                rebalance_timeout_ms=10000,
                subscribed_topic_names=[t],
                server_assignor=None,
                topic_partitions=[],
            ),
            0,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
        "ConsumerGroupDescribe": (
            ConsumerGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=True),
            0,
            E.GROUP_AUTHORIZATION_FAILED,
        ),
    }


def error_codes(obj, found: set | None = None) -> set[int]:
    """Every error code in a response, at any depth (kafka-python messages keep fields in slots)."""
    found = set() if found is None else found
    if isinstance(obj, list | tuple):
        for item in obj:
            error_codes(item, found)
        return found
    for name in getattr(type(obj), "__slots__", ()):
        value = getattr(obj, name, None)
        if name.endswith("error_code") and isinstance(value, int):
            found.add(value)
        elif isinstance(value, list) or hasattr(type(value), "__slots__"):
            error_codes(value, found)
    return found


async def sasl_connection(
    port: int, user: str, password: str, *, then: bytes = b""
) -> tuple[RawClient, object]:
    """A raw connection authenticated with SCRAM-SHA-512 (or failing to); ``then`` is written right
    behind the client's final SCRAM message, in the same write."""
    client = await RawClient.connect(port)
    handshake = await client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    assert handshake.error_code == 0
    scram = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
    first = await client.request(SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()), 2)
    scram.set_server_first(bytes(first.auth_bytes).decode())
    final = SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode())
    final.API_VERSION = 2
    final.with_header(correlation_id=99, client_id="matrix")
    await client.send_raw(bytes(final.encode(header=True, framed=True)) + then)
    frame = await client.read_frame()
    answer = None if frame is None else SaslAuthenticateResponse.decode(frame, version=2, header=True)
    return client, answer


def framed(request, version: int, correlation_id: int = 7) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="matrix")
    return bytes(request.encode(header=True, framed=True))


def snapshot(broker) -> dict:
    with AdminClient(broker.bootstrap, security=broker.scram()) as admin:
        topics = sorted(admin.list_topics())
        ends = admin.list_offsets({TopicPartition(TOPIC, 0): -1})
        return {
            "topics": topics,
            "partitions": len(admin.describe_topic(TOPIC).partitions),
            "configs": admin.describe_configs(TOPIC),
            "end": ends,
            "groups": sorted(g.group_id for g in admin.list_groups()),
            "offsets": admin.list_group_offsets(GROUP),
            "transactions": sorted(
                (t.transactional_id, t.state, t.producer_id) for t in admin.list_transactions()
            ),
            "acls": admin.describe_acls(),
            "scram": admin.describe_user_scram_credentials(),
            "quotas": [(e.entity, e.values) for e in admin.describe_client_quotas({}, [], strict=False)],
        }


@pytest.fixture(scope="module")
def prepared(secure_broker):
    """A topic with records, a group with an offset, a committed transaction, an ACL and a quota, all
    by the administrator: what the refused requests must leave alone."""
    admin_settings = secure_broker.scram()
    with AdminClient(secure_broker.bootstrap, security=admin_settings) as admin:
        admin.create_topic(TOPIC, 1)
        admin.create_acls(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    TOPIC,
                    PatternType.LITERAL,
                    "User:carol",
                    "*",
                    AclOperation.READ,
                    PermissionType.ALLOW,
                )
            ]
        )
        admin.alter_client_quotas({"user": "carol"}, {"producer_byte_rate": 1e9})
    producer = Producer({**admin_settings, "transactional.id": TXN})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, b"kept", partition=0)
    producer.commit_transaction()
    producer.close()
    consumer = Consumer(
        TOPIC,
        config={
            **admin_settings,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        },
    )
    while not consumer.poll(timeout_ms=500):
        pass
    consumer.commit()
    consumer.close()
    return secure_broker


def test_the_table_names_every_api_the_broker_serves():
    assert set(API_ACCESS) == {h.API_KEY for h in HANDLERS}
    checked = {type(request).API_KEY for request, _, _ in requests().values()}
    assert checked == {h.API_KEY for h in HANDLERS}  # the matrix below sends every one of them


def test_every_api_refused_three_ways_and_nothing_changes(prepared):
    broker = prepared
    before = snapshot(broker)
    table = requests()

    async def scenario() -> dict[str, list[str]]:
        problems: dict[str, list[str]] = {}
        for name, (request, version, expected) in table.items():
            api = type(request).API_KEY
            wrong: list[str] = []
            # 1. unauthenticated on the SASL listener: closed, no answer (ApiVersions is answered).
            client = await RawClient.connect(broker.sasl_port)
            await client.send_raw(framed(request, version))
            frame = await client.read_frame(timeout=10)
            if api not in (18, 17) and frame is not None:
                wrong.append("unauthenticated: answered instead of closed")
            await client.close()
            # 2. a wrong password, with the request right behind the failing final message.
            client, answer = await sasl_connection(
                broker.sasl_port, "bob", "wrong", then=framed(request, version, 8)
            )
            if answer is None or answer.error_code != E.SASL_AUTHENTICATION_FAILED:
                wrong.append(f"wrong password: SaslAuthenticate answered {answer}")
            if await client.read_frame(timeout=5) is not None:
                wrong.append("wrong password: the request behind it was answered")
            await client.close()
            # 3. authenticated, without any ACL.
            client, answer = await sasl_connection(broker.sasl_port, "bob", "bob-secret")
            response = await client.request(request, version)
            await client.close()
            if callable(expected):
                if not expected(response):
                    wrong.append(f"no ACL: answer not filtered: {response}")
            elif expected not in error_codes(response):
                wrong.append(
                    f"no ACL: expected {expected.name}, got {sorted(E(c).name for c in error_codes(response))}"
                )
            if wrong:
                problems[name] = wrong
        return problems

    problems = asyncio.run(scenario())
    assert problems == {}
    after = snapshot(broker)
    assert after == before


def test_denials_are_logged_one_line_each(prepared):
    log = prepared.log_text()
    lines = [
        line for line in log.splitlines() if "is Denied operation = CREATE" in line and NEW_TOPIC in line
    ]
    assert lines, "no denial of CreateTopics was logged"
    assert "Principal = User:bob" in lines[-1] and "from host = 127.0.0.1" in lines[-1]
    assert "on resource = Topic:LITERAL:matrix-new" in lines[-1]
