"""Our own message schemas (``protocol.schemas``, loaded by kafka-python's ``ApiMessage``) encode and
decode at every version we serve."""

from __future__ import annotations

import uuid

from onceflow.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

_Group = ConsumerGroupDescribeResponse.DescribedGroup
_Member = _Group.Member
_Assignment = _Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions


def _describe_response(member_type: int) -> ConsumerGroupDescribeResponse:
    owned = _Assignment(
        topic_partitions=[_TopicPartitions(topic_id=uuid.UUID(int=7), topic_name="t", partitions=[0, 2])]
    )
    member = _Member(
        member_id="m1",
        instance_id="i1",
        rack_id=None,
        member_epoch=4,
        client_id="client",
        client_host="/127.0.0.1",
        subscribed_topic_names=["t"],
        subscribed_topic_regex=None,
        assignment=owned,
        target_assignment=owned,
        member_type=member_type,
    )
    group = _Group(
        error_code=0,
        error_message=None,
        group_id="g",
        group_state="Stable",
        group_epoch=4,
        assignment_epoch=4,
        assignor_name="uniform",
        members=[member],
        authorized_operations=-(2**31),
    )
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[group])


def test_consumer_group_describe_request_is_the_same_at_v0_and_v1():
    request = ConsumerGroupDescribeRequest(group_ids=["a", "b"], include_authorized_operations=True)
    v0, v1 = (bytes(request.encode(version=v)) for v in (0, 1))
    assert v0 == v1
    decoded = ConsumerGroupDescribeRequest.decode(v1, version=1)
    assert (decoded.group_ids, decoded.include_authorized_operations) == (["a", "b"], True)


def test_consumer_group_describe_response_v1_carries_the_member_type():
    response = _describe_response(member_type=1)
    v1 = bytes(response.encode(version=1))
    (member,) = ConsumerGroupDescribeResponse.decode(v1, version=1).groups[0].members
    assert member.member_type == 1
    assert (member.member_id, member.instance_id, member.member_epoch) == ("m1", "i1", 4)
    assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [("t", [0, 2])]
    # v0 has no such field: one int8 less per member, and a v0 reader gets the default, -1 (unknown).
    v0 = bytes(response.encode(version=0))
    assert len(v0) == len(v1) - 1
    (old,) = ConsumerGroupDescribeResponse.decode(v0, version=0).groups[0].members
    assert old.member_type == -1
    assert _Member(member_id="m", member_epoch=0).member_type == -1
