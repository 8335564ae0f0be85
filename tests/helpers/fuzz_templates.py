"""Valid requests of the admin, classic-group and transaction APIs, for ``fuzz_frames.template_frames``.

Each function returns ``[(request, version)]``. Writes name only the fuzz target topic (or topics
named after it), never the anchor topic, whose records the fuzz test checks are untouched.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClusterRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

GROUP = "fuzz-group"
TXN_ID = "fuzz-txn"
PRODUCER_ID = 0  # the first id the broker hands out: some transactional templates match a real producer


def admin_templates(topic: str, anchor_topic: str) -> list[tuple[object, int]]:
    """Topic administration. Every write names ``topic`` (or a topic made from its name), never the anchor."""
    create = CreateTopicsRequest.CreatableTopic
    alter = AlterConfigsRequest.AlterConfigsResource
    incremental = IncrementalAlterConfigsRequest.AlterConfigsResource
    grow = CreatePartitionsRequest.CreatePartitionsTopic
    delete_records = DeleteRecordsRequest.DeleteRecordsTopic
    new_topic = create(
        name=f"{topic}-new",
        num_partitions=2,
        replication_factor=1,
        assignments=[],
        configs=[create.CreatableTopicConfig(name="retention.ms", value="3600000")],
    )
    assigned = create(
        name=f"{topic}-assigned",
        num_partitions=-1,
        replication_factor=-1,
        assignments=[create.CreatableReplicaAssignment(partition_index=0, broker_ids=[0])],
        configs=[],
    )
    return [
        (CreateTopicsRequest(topics=[new_topic], timeout_ms=5_000, validate_only=False), 2),
        (CreateTopicsRequest(topics=[assigned], timeout_ms=5_000, validate_only=False), 5),
        (CreateTopicsRequest(topics=[new_topic], timeout_ms=5_000, validate_only=True), 7),
        (DeleteTopicsRequest(topic_names=[f"{topic}-new"], timeout_ms=5_000), 3),
        (
            DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=f"{topic}-assigned", topic_id=None)],
                timeout_ms=5_000,
            ),
            6,
        ),
        (
            CreatePartitionsRequest(
                topics=[grow(name=topic, count=2, assignments=None)], timeout_ms=5_000, validate_only=False
            ),
            1,
        ),
        (
            CreatePartitionsRequest(
                topics=[
                    grow(name=topic, count=3, assignments=[grow.CreatePartitionsAssignment(broker_ids=[0])])
                ],
                timeout_ms=5_000,
                validate_only=True,
            ),
            3,
        ),
        (
            DeleteRecordsRequest(
                topics=[
                    delete_records(
                        name=topic,
                        partitions=[delete_records.DeleteRecordsPartition(partition_index=0, offset=1)],
                    )
                ],
                timeout_ms=5_000,
            ),
            1,
        ),
        (
            DeleteRecordsRequest(
                topics=[
                    delete_records(
                        name=topic,
                        partitions=[delete_records.DeleteRecordsPartition(partition_index=0, offset=-1)],
                    )
                ],
                timeout_ms=5_000,
            ),
            2,
        ),
        (
            AlterConfigsRequest(
                resources=[
                    alter(
                        resource_type=2,
                        resource_name=topic,
                        configs=[alter.AlterableConfig(name="retention.ms", value="86400000")],
                    )
                ],
                validate_only=False,
            ),
            0,
        ),
        (
            AlterConfigsRequest(
                resources=[
                    alter(
                        resource_type=2,
                        resource_name=topic,
                        configs=[alter.AlterableConfig(name="max.message.bytes", value=None)],
                    )
                ],
                validate_only=True,
            ),
            2,
        ),
        (
            IncrementalAlterConfigsRequest(
                resources=[
                    incremental(
                        resource_type=2,
                        resource_name=topic,
                        configs=[
                            incremental.AlterableConfig(
                                name="retention.ms", config_operation=0, value="7200000"
                            )
                        ],
                    )
                ],
                validate_only=False,
            ),
            0,
        ),
        (
            IncrementalAlterConfigsRequest(
                resources=[
                    incremental(
                        resource_type=2,
                        resource_name=topic,
                        configs=[
                            incremental.AlterableConfig(
                                name="cleanup.policy", config_operation=2, value="delete"
                            ),
                            incremental.AlterableConfig(name="retention.ms", config_operation=1, value=None),
                        ],
                    )
                ],
                validate_only=False,
            ),
            1,
        ),
        (DescribeClusterRequest(include_cluster_authorized_operations=True), 0),
        (DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1), 1),
        (
            DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=1, include_fenced_brokers=True
            ),
            2,
        ),
        (DescribeLogDirsRequest(topics=None), 1),
        (
            DescribeLogDirsRequest(
                topics=[
                    DescribeLogDirsRequest.DescribableLogDirTopic(topic=topic, partitions=[0, 1]),
                    DescribeLogDirsRequest.DescribableLogDirTopic(topic=anchor_topic, partitions=[0]),
                ]
            ),
            4,
        ),
        (
            ElectLeadersRequest(
                topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])],
                timeout_ms=1000,
            ),
            0,
        ),
        (ElectLeadersRequest(election_type=1, topic_partitions=None, timeout_ms=1000), 2),
        (
            DescribeAclsRequest(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
            3,
        ),
        (
            CreateAclsRequest(
                creations=[
                    CreateAclsRequest.AclCreation(
                        resource_type=2,
                        resource_name=topic,
                        resource_pattern_type=3,
                        principal="User:fuzz",
                        host="*",
                        operation=3,
                        permission_type=3,
                    )
                ]
            ),
            1,
        ),
        (
            DeleteAclsRequest(
                filters=[
                    DeleteAclsRequest.DeleteAclsFilter(
                        resource_type_filter=2,
                        resource_name_filter=topic,
                        pattern_type_filter=3,
                        principal_filter=None,
                        host_filter=None,
                        operation=1,
                        permission_type=1,
                    )
                ]
            ),
            2,
        ),
    ]


def group_templates(topic: str) -> list[tuple[object, int]]:
    """Classic group membership, offsets and group administration, all on ``GROUP``."""
    join = JoinGroupRequest
    commit = OffsetCommitRequest.OffsetCommitRequestTopic
    offset_delete = OffsetDeleteRequest.OffsetDeleteRequestTopic
    protocols = [join.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x03\x00\x00\x00\x01\x00\x01t")]

    def join_group(member_id: str) -> JoinGroupRequest:
        return join(
            group_id=GROUP,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=protocols,
            reason="fuzz",
        )

    def offset_commit(generation: int, member: str) -> OffsetCommitRequest:
        return OffsetCommitRequest(
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member,
            group_instance_id=None,
            retention_time_ms=-1,
            topics=[
                commit(
                    name=topic,
                    partitions=[
                        commit.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=3,
                            committed_leader_epoch=-1,
                            commit_timestamp=-1,
                            committed_metadata="fuzz",
                        )
                    ],
                )
            ],
        )

    sync = SyncGroupRequest(
        group_id=GROUP,
        generation_id=1,
        member_id="fuzz-member",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id="fuzz-member", assignment=b"")],
    )
    heartbeat = HeartbeatRequest(
        group_id=GROUP, generation_id=1, member_id="fuzz-member", group_instance_id=None
    )
    leave = LeaveGroupRequest.MemberIdentity
    return [
        (join_group(""), 1),
        (join_group(""), 5),
        (join_group("fuzz-member"), 9),
        (sync, 1),
        (sync, 5),
        (heartbeat, 1),
        (heartbeat, 4),
        (LeaveGroupRequest(group_id=GROUP, member_id="fuzz-member"), 1),
        (
            LeaveGroupRequest(
                group_id=GROUP,
                members=[leave(member_id="fuzz-member", group_instance_id="fuzz-instance", reason="fuzz")],
            ),
            5,
        ),
        (offset_commit(-1, ""), 2),
        (offset_commit(1, "fuzz-member"), 9),
        (DescribeGroupsRequest(groups=[GROUP, "fuzz-group-848"], include_authorized_operations=False), 1),
        (DescribeGroupsRequest(groups=[GROUP], include_authorized_operations=True), 5),
        (ListGroupsRequest(), 1),
        (ListGroupsRequest(states_filter=["Stable", "Empty"], types_filter=["classic"]), 5),
        (
            OffsetDeleteRequest(
                group_id=GROUP,
                topics=[
                    offset_delete(
                        name=topic,
                        partitions=[offset_delete.OffsetDeleteRequestPartition(partition_index=0)],
                    )
                ],
            ),
            0,
        ),
        (DeleteGroupsRequest(groups_names=[GROUP]), 1),
        (DeleteGroupsRequest(groups_names=[GROUP, "fuzz-group-848"]), 2),
    ]


def transaction_templates(topic: str) -> list[tuple[object, int]]:
    """The transaction APIs for ``TXN_ID`` (producer id ``PRODUCER_ID``, epoch 0) on ``topic``."""
    add = AddPartitionsToTxnRequest
    batched = add.AddPartitionsToTxnTransaction
    offsets = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    marker = WriteTxnMarkersRequest.WritableTxnMarker

    def add_partitions_v4(verify_only: bool) -> AddPartitionsToTxnRequest:
        return add(
            transactions=[
                batched(
                    transactional_id=TXN_ID,
                    producer_id=PRODUCER_ID,
                    producer_epoch=0,
                    verify_only=verify_only,
                    topics=[batched.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
                )
            ]
        )

    v3_add = add(
        v3_and_below_transactional_id=TXN_ID,
        v3_and_below_producer_id=PRODUCER_ID,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[add.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )
    add_offsets = AddOffsetsToTxnRequest(
        transactional_id=TXN_ID, producer_id=PRODUCER_ID, producer_epoch=0, group_id=GROUP
    )
    txn_offsets = TxnOffsetCommitRequest(
        transactional_id=TXN_ID,
        group_id=GROUP,
        producer_id=PRODUCER_ID,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            offsets(
                name=topic,
                partitions=[
                    offsets.TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=2,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )

    def end_txn(commit: bool) -> EndTxnRequest:
        return EndTxnRequest(
            transactional_id=TXN_ID, producer_id=PRODUCER_ID, producer_epoch=0, committed=commit
        )

    def write_markers(version: int) -> WriteTxnMarkersRequest:
        return WriteTxnMarkersRequest(
            markers=[
                marker(
                    producer_id=PRODUCER_ID + 1_000,
                    producer_epoch=0,
                    transaction_result=False,
                    topics=[marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                    coordinator_epoch=0,
                    transaction_version=version,
                )
            ]
        )

    return [
        (InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000), 1),
        (
            InitProducerIdRequest(
                transactional_id=TXN_ID,
                transaction_timeout_ms=60_000,
                producer_id=PRODUCER_ID,
                producer_epoch=0,
            ),
            5,
        ),
        (v3_add, 1),
        (v3_add, 3),
        (add_partitions_v4(False), 4),
        (add_partitions_v4(True), 5),
        (add_offsets, 1),
        (add_offsets, 4),
        (txn_offsets, 1),
        (txn_offsets, 3),
        (txn_offsets, 5),
        (end_txn(True), 1),
        (end_txn(False), 3),
        (end_txn(True), 5),
        (write_markers(0), 1),
        (write_markers(2), 2),
        (DescribeTransactionsRequest(transactional_ids=[TXN_ID, "no-such-txn"]), 0),
        (ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0),
        (
            ListTransactionsRequest(
                state_filters=["Ongoing"], producer_id_filters=[PRODUCER_ID], duration_filter=0
            ),
            1,
        ),
        (
            ListTransactionsRequest(
                state_filters=[],
                producer_id_filters=[],
                duration_filter=-1,
                transactional_id_pattern="fuzz-.*",
            ),
            2,
        ),
        (
            DescribeProducersRequest(
                topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0, 1, 7])]
            ),
            0,
        ),
    ]
