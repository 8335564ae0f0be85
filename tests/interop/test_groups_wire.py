"""Group APIs at the wire, for answers real clients hide: batched FindCoordinator, bad key types,
unknown topics in commits, multi-group OffsetFetch, OffsetDelete, versions of LeaveGroup."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import WireClient
from tests.interop.test_groups import create_topic

from onceflow.protocol.errors import ErrorCode as E

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("groups-wire"), extra_args=["--config", "group.initial.rebalance.delay.ms=0"]
    )
    proc.start()
    yield proc
    proc.stop()


def commit_request(group, topic, partitions, generation=-1, member=""):
    OCT = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        topics=[
            OCT(
                name=topic,
                partitions=[
                    OCT.OffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for p, o in partitions
                ],
            )
        ],
    )


def test_find_coordinator_batched_and_key_types(wire_broker):
    with WireClient(wire_broker.bootstrap) as w:
        resp = w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]), 4)
        assert [(c.key, c.error_code, c.port) for c in resp.coordinators] == [
            ("a", 0, wire_broker.port),
            ("b", 0, wire_broker.port),
        ]
        txn = w.request(FindCoordinatorRequest(key="tx-1", key_type=1), 3)
        assert (txn.error_code, txn.port) == (0, wire_broker.port)
        bad = w.request(FindCoordinatorRequest(key="x", key_type=7), 3)
        assert bad.error_code == E.INVALID_REQUEST


def test_commit_unknown_topic_and_multi_group_fetch(wire_broker):
    topic = topic_name("w")
    create_topic(wire_broker.bootstrap, topic)
    with WireClient(wire_broker.bootstrap) as w:
        ok = w.request(commit_request("wg1", topic, [(0, 7), (9, 1)]), 8)
        assert [(p.partition_index, p.error_code) for p in ok.topics[0].partitions] == [
            (0, 0),
            (9, E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        missing = w.request(commit_request("wg1", "no-such-topic", [(0, 1)]), 8)
        assert missing.topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        stale = w.request(commit_request("fresh-group", topic, [(0, 1)], generation=5, member="m"), 8)
        assert stale.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION

        G = OffsetFetchRequest.OffsetFetchRequestGroup
        fetched = w.request(
            OffsetFetchRequest(
                groups=[G(group_id="wg1", topics=None), G(group_id="nobody", topics=None)],
                require_stable=True,
            ),
            8,
        )
        by_group = {
            g.group_id: {
                (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
            }
            for g in fetched.groups
        }
        assert by_group == {"wg1": {(topic, 0): 7}, "nobody": {}}

        deleted = w.request(
            OffsetDeleteRequest(
                group_id="wg1",
                topics=[
                    OffsetDeleteRequest.OffsetDeleteRequestTopic(
                        name=topic,
                        partitions=[
                            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                                partition_index=0
                            )
                        ],
                    )
                ],
            ),
            0,
        )
        assert deleted.error_code == 0 and deleted.topics[0].partitions[0].error_code == 0
        gone = w.request(OffsetFetchRequest(group_id="wg1", topics=None), 5)
        assert gone.topics == []
        unknown = w.request(OffsetDeleteRequest(group_id="never-was", topics=[]), 0)
        assert unknown.error_code == E.GROUP_ID_NOT_FOUND


def test_commit_with_a_generation_to_an_unknown_group_at_v9_and_v8(wire_broker):
    """Kafka's group coordinator: OffsetCommit v9+ naming a group that does not exist with a
    generation (or member epoch) >= 0 is GROUP_ID_NOT_FOUND in every partition, v8 and older keep
    ILLEGAL_GENERATION; nothing is stored and no group appears. Generation -1 creates the group."""
    topic = topic_name("w")
    create_topic(wire_broker.bootstrap, topic)
    group = f"nobody-{topic}"
    with WireClient(wire_broker.bootstrap) as w:
        v9 = w.request(commit_request(group, topic, [(0, 3), (1, 3)], generation=2, member="m"), 9)
        assert [p.error_code for p in v9.topics[0].partitions] == [E.GROUP_ID_NOT_FOUND] * 2
        v8 = w.request(commit_request(group, topic, [(0, 3), (1, 3)], generation=2, member="m"), 8)
        assert [p.error_code for p in v8.topics[0].partitions] == [E.ILLEGAL_GENERATION] * 2
        described = w.request(DescribeGroupsRequest(groups=[group]), 5)
        assert (described.groups[0].error_code, described.groups[0].group_state) == (0, "Dead")
        fetched = w.request(OffsetFetchRequest(group_id=group, topics=None), 5)
        assert fetched.topics == []
        simple = w.request(commit_request(group, topic, [(0, 3)], generation=-1, member="m"), 9)
        assert simple.topics[0].partitions[0].error_code == 0
        described = w.request(DescribeGroupsRequest(groups=[group]), 5)
        assert (described.groups[0].error_code, described.groups[0].group_state) == (0, "Empty")


def test_join_sync_heartbeat_leave_at_old_and_new_versions(wire_broker):
    P = JoinGroupRequest.JoinGroupRequestProtocol
    with WireClient(wire_broker.bootstrap) as w:
        # v3: no KIP-394 round; joins at once
        j = w.request(
            JoinGroupRequest(
                group_id="wj",
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[P(name="range", metadata=b"m")],
            ),
            3,
        )
        assert j.error_code == 0 and j.leader == j.member_id and j.generation_id == 1
        s = w.request(
            SyncGroupRequest(
                group_id="wj",
                generation_id=1,
                member_id=j.member_id,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"A")
                ],
            ),
            2,
        )
        assert (s.error_code, bytes(s.assignment)) == (0, b"A")
        hb = w.request(HeartbeatRequest(group_id="wj", generation_id=0, member_id=j.member_id), 2)
        assert hb.error_code == E.ILLEGAL_GENERATION
        d = w.request(DescribeGroupsRequest(groups=["wj"]), 5)
        assert d.groups[0].group_state == "Stable" and d.groups[0].protocol_data == "range"
        # v9: the first join needs a member id
        j9 = w.request(
            JoinGroupRequest(
                group_id="wj9",
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[P(name="range", metadata=b"m")],
                reason=None,
            ),
            9,
        )
        assert j9.error_code == E.MEMBER_ID_REQUIRED and j9.member_id
        # LeaveGroup v0 (one member) and v3 (batch)
        old = w.request(LeaveGroupRequest(group_id="wj", member_id="ghost"), 0)
        assert old.error_code == E.UNKNOWN_MEMBER_ID
        M = LeaveGroupRequest.MemberIdentity
        new = w.request(
            LeaveGroupRequest(
                group_id="wj",
                members=[
                    M(member_id=j.member_id, group_instance_id=None),
                    M(member_id="x", group_instance_id=None),
                ],
            ),
            3,
        )
        assert new.error_code == 0 and [m.error_code for m in new.members] == [0, E.UNKNOWN_MEMBER_ID]
        d = w.request(DescribeGroupsRequest(groups=["wj"]), 5)
        assert d.groups[0].group_state == "Empty"
