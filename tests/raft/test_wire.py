"""The quorum's RPCs on the wire: each core message survives the trip through Kafka's encoding,
and our bytes are what an independent decoder (kio, generated from Kafka's own schemas) reads, field
for field, at every version we serve."""

from __future__ import annotations

import io

import pytest
from kio.schema.begin_quorum_epoch.v0 import request as begin_request_v0
from kio.schema.begin_quorum_epoch.v0 import response as begin_response_v0
from kio.schema.describe_quorum.v0 import response as describe_response_v0
from kio.schema.describe_quorum.v1 import response as describe_response_v1
from kio.schema.end_quorum_epoch.v0 import request as end_request_v0
from kio.schema.end_quorum_epoch.v0 import response as end_response_v0
from kio.schema.fetch.v16 import request as fetch_request_v16
from kio.schema.fetch.v16 import response as fetch_response_v16
from kio.schema.fetch_snapshot.v0 import request as fetch_snapshot_request_v0
from kio.schema.fetch_snapshot.v0 import response as fetch_snapshot_response_v0
from kio.schema.vote.v0 import request as vote_request_v0
from kio.schema.vote.v0 import response as vote_response_v0
from kio.serial import entity_reader, entity_writer

from onceflow.protocol.apis import REQUEST_CLASSES, RESPONSE_CLASSES
from onceflow.protocol.errors import ErrorCode
from onceflow.raft import wire
from onceflow.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaDescription,
    VoteRequest,
    VoteResponse,
)
from onceflow.raft.records import Batch, LeaderChange, OffsetAndEpoch

REQUESTS = [
    VoteRequest(7, 2, 6, 120, "cluster"),
    BeginQuorumEpochRequest(3, 7),
    EndQuorumEpochRequest(3, 7, (2, 1)),
    FetchRequest(2, 7, 120, 6, 500, 1 << 20),
    FetchRequest(100, 7, 0, 0, 0, 4096, "cluster"),
    FetchSnapshotRequest(2, 7, OffsetAndEpoch(90, 5), 4096, 1 << 20),
    DescribeQuorumRequest(),
]
BATCHES = (
    Batch(120, 7, 1_700_000_000_000, (), LeaderChange(3, (1, 2, 3), (2, 3))),
    Batch(121, 7, 1_700_000_000_001, (b"first", b"second")),
)
RESPONSES = [
    (wire.VOTE, VoteResponse(0, -1, 7, True)),
    (wire.VOTE, VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 8, False)),
    (wire.BEGIN_QUORUM_EPOCH, BeginQuorumEpochResponse(0, 3, 7)),
    (wire.END_QUORUM_EPOCH, EndQuorumEpochResponse(0, -1, 8)),
    (wire.FETCH, FetchResponse(0, 3, 7, 121, 0, BATCHES)),
    (wire.FETCH, FetchResponse(0, 3, 7, -1, 0, (), diverging_epoch=OffsetAndEpoch(100, 5))),
    (wire.FETCH, FetchResponse(0, 3, 7, 150, 90, (), snapshot_id=OffsetAndEpoch(90, 5))),
    (wire.FETCH, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 3, 7, -1, 0)),
    (
        wire.FETCH_SNAPSHOT,
        FetchSnapshotResponse(0, 3, 7, OffsetAndEpoch(90, 5), 10_000, 4096, b"\x00\x01" * 100),
    ),
    (wire.FETCH_SNAPSHOT, FetchSnapshotResponse(ErrorCode.SNAPSHOT_NOT_FOUND, 3, 7)),
    (
        wire.DESCRIBE_QUORUM,
        DescribeQuorumResponse(
            0,
            3,
            7,
            121,
            (ReplicaDescription(1, 121, 1000, 990), ReplicaDescription(3, 121, 1001, 1001)),
            (ReplicaDescription(100, 119, 995, 900),),
        ),
    ),
]


@pytest.mark.parametrize("body", REQUESTS, ids=lambda b: type(b).__name__)
def test_requests_round_trip(body) -> None:
    api_key = wire.api_key_of(body)
    version = wire.send_version(api_key)
    raw = bytes(wire.request_to_wire(body).encode(version=version))
    decoded = REQUEST_CLASSES[api_key].decode(raw, version=version)
    assert wire.request_from_wire(api_key, decoded) == body


@pytest.mark.parametrize(("api_key", "body"), RESPONSES, ids=lambda x: type(x).__name__)
def test_responses_round_trip_at_every_version(api_key: int, body) -> None:
    low, high = wire.VERSIONS[api_key]
    for version in range(low, high + 1):
        raw = bytes(wire.response_to_wire(api_key, version, body).encode(version=version))
        back = wire.response_from_wire(api_key, RESPONSE_CLASSES[api_key].decode(raw, version=version))
        if api_key == wire.DESCRIBE_QUORUM and version == 0:  # v0 has no timestamps
            body = DescribeQuorumResponse(
                body.error,
                body.leader_id,
                body.leader_epoch,
                body.high_watermark,
                tuple(ReplicaDescription(r.replica_id, r.log_end_offset, -1, -1) for r in body.voters),
                tuple(ReplicaDescription(r.replica_id, r.log_end_offset, -1, -1) for r in body.observers),
            )
        assert back == body, version


def kio_read(schema, raw: bytes):
    entity, size = entity_reader(schema)(memoryview(raw), 0)
    assert size == len(raw), "kio read fewer bytes than we wrote"
    out = io.BytesIO()
    entity_writer(schema)(out, entity)
    assert out.getvalue() == raw, "kio writes other bytes for what it read"
    return entity


def test_kio_reads_our_requests_as_kafka_defines_them() -> None:
    def raw(body) -> bytes:
        return bytes(wire.request_to_wire(body).encode(version=wire.send_version(wire.api_key_of(body))))

    vote = kio_read(vote_request_v0.VoteRequest, raw(REQUESTS[0]))
    (partition,) = vote.topics[0].partitions
    assert vote.cluster_id == "cluster" and vote.topics[0].topic_name == "__cluster_metadata"
    assert (
        partition.replica_epoch,
        partition.replica_id,
        partition.last_offset_epoch,
        partition.last_offset,
    ) == (
        7,
        2,
        6,
        120,
    )
    begin = kio_read(begin_request_v0.BeginQuorumEpochRequest, raw(REQUESTS[1]))
    assert (begin.topics[0].partitions[0].leader_id, begin.topics[0].partitions[0].leader_epoch) == (3, 7)
    end = kio_read(end_request_v0.EndQuorumEpochRequest, raw(REQUESTS[2]))
    assert end.topics[0].partitions[0].preferred_successors == (2, 1)
    fetch = kio_read(fetch_request_v16.FetchRequest, raw(REQUESTS[3]))
    (fetched,) = fetch.topics[0].partitions
    assert fetch.replica_state.replica_id == 2 and str(fetch.topics[0].topic_id) == str(
        wire.METADATA_TOPIC_ID
    )
    assert (fetched.current_leader_epoch, fetched.fetch_offset, fetched.last_fetched_epoch) == (7, 120, 6)
    snapshot = kio_read(fetch_snapshot_request_v0.FetchSnapshotRequest, raw(REQUESTS[5]))
    (wanted,) = snapshot.topics[0].partitions
    assert (wanted.snapshot_id.end_offset, wanted.snapshot_id.epoch, wanted.position) == (90, 5, 4096)


def test_kio_reads_our_responses_as_kafka_defines_them() -> None:
    def raw(api_key: int, body, version: int) -> bytes:
        return bytes(wire.response_to_wire(api_key, version, body).encode(version=version))

    vote = kio_read(vote_response_v0.VoteResponse, raw(wire.VOTE, RESPONSES[1][1], 0))
    assert vote.topics[0].partitions[0].leader_epoch == 8 and not vote.topics[0].partitions[0].vote_granted
    kio_read(begin_response_v0.BeginQuorumEpochResponse, raw(wire.BEGIN_QUORUM_EPOCH, RESPONSES[2][1], 0))
    kio_read(end_response_v0.EndQuorumEpochResponse, raw(wire.END_QUORUM_EPOCH, RESPONSES[3][1], 0))
    fetch = kio_read(fetch_response_v16.FetchResponse, raw(wire.FETCH, RESPONSES[5][1], 16))
    (answer,) = fetch.responses[0].partitions
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (5, 100)
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (3, 7)
    fetch = kio_read(fetch_response_v16.FetchResponse, raw(wire.FETCH, RESPONSES[6][1], 16))
    assert fetch.responses[0].partitions[0].snapshot_id.end_offset == 90
    chunk = kio_read(
        fetch_snapshot_response_v0.FetchSnapshotResponse, raw(wire.FETCH_SNAPSHOT, RESPONSES[8][1], 0)
    )
    assert chunk.topics[0].partitions[0].size == 10_000
    for version, schema in ((0, describe_response_v0), (1, describe_response_v1)):
        described = kio_read(
            schema.DescribeQuorumResponse, raw(wire.DESCRIBE_QUORUM, RESPONSES[10][1], version)
        )
        (partition,) = described.topics[0].partitions
        assert [v.replica_id for v in partition.current_voters] == [1, 3]
        assert [o.replica_id for o in partition.observers] == [100]


def test_requests_for_another_partition_are_refused_with_kafkas_errors() -> None:
    body = wire.request_to_wire(VoteRequest(7, 2, 6, 120))
    body.topics[0].partitions[0].partition_index = 3
    with pytest.raises(wire.WireError) as info:
        wire.request_from_wire(wire.VOTE, body)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    describe = wire.request_to_wire(DescribeQuorumRequest())
    describe.topics[0].topic_name = "other"
    with pytest.raises(wire.WireError) as info:
        wire.request_from_wire(wire.DESCRIBE_QUORUM, describe)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_top_level_error_is_a_failed_request() -> None:
    for api_key in (wire.VOTE, wire.FETCH, wire.FETCH_SNAPSHOT, wire.BEGIN_QUORUM_EPOCH):
        version = wire.VERSIONS[api_key][1]
        raw = bytes(wire.error_response(api_key, version, ErrorCode.INVALID_REQUEST).encode(version=version))
        with pytest.raises(wire.WireError) as info:
            wire.response_from_wire(api_key, RESPONSE_CLASSES[api_key].decode(raw, version=version))
        assert info.value.code == ErrorCode.INVALID_REQUEST
