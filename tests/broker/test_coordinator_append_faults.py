"""A coordinator append that fails (fault point ``fail-coordinator-append``) over the wire: for each
coordinator the client gets a retriable error, the coordinator's state is still what the log holds
(what it says before the failure, and after a restart), and the same request sent again succeeds."""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer.group import JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest
from tests.broker.raw_client import RawClient, running_broker
from tests.transactions import wire

from onceflow.broker.faults import FAIL_COORDINATOR_APPEND
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

E = ErrorCode
TOPIC = "faulty"
RETRIABLE = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE}


def run(coro):
    return asyncio.run(coro)


def _commit(group: str, offset: int, generation: int = -1, member: str = "") -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            T(
                name=TOPIC,
                partitions=[
                    T.OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )


async def _committed_offset(client: RawClient, group: str) -> int:
    resp = await client.request(wire.offset_fetch(group, TOPIC, [0], False), 7)
    return resp.topics[0].partitions[0].committed_offset


def _commit_code(resp) -> ErrorCode:
    return ErrorCode(resp.topics[0].partitions[0].error_code)


def test_offset_commit(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic(TOPIC, 1)
            client = await RawClient.connect(broker.port)
            assert _commit_code(await client.request(_commit("g", 5), 8)) is E.NONE
            broker.faults.set(FAIL_COORDINATOR_APPEND, 1.0)
            assert _commit_code(await client.request(_commit("g", 9), 8)) in RETRIABLE
            assert await _committed_offset(client, "g") == 5  # not applied: the log has 5
            broker.faults.clear()
            assert _commit_code(await client.request(_commit("g", 9), 8)) is E.NONE  # the retry
            assert await _committed_offset(client, "g") == 9
            await client.close()
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            assert await _committed_offset(client, "g") == 9
            await client.close()

    run(scenario())


def test_transaction_coordinator(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            broker.faults.set(FAIL_COORDINATOR_APPEND, 1.0)
            resp = await client.request(wire.init_producer_id("tid"), 4)
            assert ErrorCode(resp.error_code) in RETRIABLE
            (described,) = (await client.request(wire.describe(["tid"]), 0)).transaction_states
            assert described.error_code == E.TRANSACTIONAL_ID_NOT_FOUND  # nothing kept in memory
            broker.faults.clear()
            resp = await client.request(wire.init_producer_id("tid"), 4)
            assert (resp.error_code, resp.producer_epoch) == (0, 0)
            pid = resp.producer_id
            broker.faults.set(FAIL_COORDINATOR_APPEND, 1.0)
            resp = await client.request(wire.init_producer_id("tid"), 4)  # an epoch bump that fails
            assert ErrorCode(resp.error_code) in RETRIABLE
            broker.faults.clear()
            resp = await client.request(wire.init_producer_id("tid"), 4)
            assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (0, pid, 1)
            await client.close()
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            (described,) = (await client.request(wire.describe(["tid"]), 0)).transaction_states
            assert (described.producer_id, described.producer_epoch) == (pid, 1)
            await client.close()

    run(scenario())


def _heartbeat(member: str, epoch: int) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="cg",
        member_id=member,
        member_epoch=epoch,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=30_000 if epoch == 0 else -1,
        subscribed_topic_names=[TOPIC] if epoch == 0 else None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=[] if epoch == 0 else None,
    )


def test_consumer_group_heartbeat(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.topics.create_topic(TOPIC, 2)
            client = await RawClient.connect(broker.port)
            broker.faults.set(FAIL_COORDINATOR_APPEND, 1.0)
            resp = await client.request(_heartbeat("m1", 0), 0)
            assert ErrorCode(resp.error_code) in RETRIABLE
            (described,) = (await client.request(ConsumerGroupDescribeRequest(group_ids=["cg"]), 0)).groups
            assert described.error_code == E.GROUP_ID_NOT_FOUND  # the join did not happen
            broker.faults.clear()
            resp = await client.request(_heartbeat("m1", 0), 0)
            assert (resp.error_code, resp.member_epoch) == (0, 1)
            assert sorted(p for t in resp.assignment.topic_partitions for p in t.partitions) == [0, 1]
            await client.close()
        async with running_broker(tmp_path) as broker:
            client = await RawClient.connect(broker.port)
            resp = await client.request(_heartbeat("m1", 1), 0)
            assert (resp.error_code, resp.member_epoch) == (0, 1)  # what it was told survived
            await client.close()

    run(scenario())


def test_classic_group_sync(tmp_path):
    """The leader's SyncGroup stores the assignment before anyone gets it: if that fails, the leader
    is answered NOT_COORDINATOR, the group rebalances, and nothing was stored."""

    async def scenario():
        async with running_broker(tmp_path, group_initial_rebalance_delay_ms=0) as broker:
            broker.topics.create_topic(TOPIC, 1)
            client = await RawClient.connect(broker.port)
            first = await client.request(join_request("cl", ""), 5)
            joined = await client.request(join_request("cl", first.member_id), 5)
            assert joined.error_code == 0 and joined.leader == joined.member_id
            broker.faults.set(FAIL_COORDINATOR_APPEND, 1.0)
            resp = await client.request(_sync("cl", joined.member_id, joined.generation_id), 3)
            assert ErrorCode(resp.error_code) in RETRIABLE
            assert broker.services.groups.coordinator.group("cl").state.kafka_name == "PreparingRebalance"
            broker.faults.clear()
            again = await client.request(join_request("cl", joined.member_id), 5)
            resp = await client.request(_sync("cl", again.member_id, again.generation_id), 3)
            assert (resp.error_code, resp.assignment) == (0, b"mine")
            await client.close()
        async with running_broker(tmp_path) as broker:
            group = broker.services.groups.coordinator.group("cl")
            assert group.generation_id == again.generation_id
            assert group.members[again.member_id].assignment == b"mine"

    run(scenario())


def join_request(group: str, member: str) -> JoinGroupRequest:
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"subscription")
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[protocol],
    )


def _sync(group: str, member: str, generation: int) -> SyncGroupRequest:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=None,
        assignments=[A(member_id=member, assignment=b"mine")],
    )
