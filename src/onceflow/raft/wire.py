"""The quorum's RPCs on the wire: core messages (``messages``) to and from Kafka's message schemas,
for the one partition ``__cluster_metadata-0``.

Versions are those Kafka 3.7 and 3.8 speak, before KIP-853 (dynamic voters, directory ids): Vote,
BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot v0 (our own schemas in ``protocol/schemas``,
kafka-python has none), DescribeQuorum v0-1 and Fetch v13-16 (kafka-python's; Fetch names the
partition by Kafka's fixed metadata topic id and carries ``ReplicaState``, ``LastFetchedEpoch``,
and in the answer ``DivergingEpoch``, ``CurrentLeader`` and ``SnapshotId``). A request for any
other partition is answered with Kafka's errors: INVALID_REQUEST at the top for the raft RPCs,
UNKNOWN_TOPIC_OR_PARTITION for DescribeQuorum.
"""

from __future__ import annotations

import uuid

from kafka.protocol.api_message import ApiMessage

from onceflow.protocol.apis import REQUEST_CLASSES, RESPONSE_CLASSES
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.internal_topics import CLUSTER_METADATA_TOPIC
from onceflow.raft import batch_codec
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
from onceflow.raft.records import OffsetAndEpoch

METADATA_TOPIC = CLUSTER_METADATA_TOPIC
METADATA_PARTITION = 0
# Kafka's Uuid.METADATA_TOPIC_ID: the fixed id of __cluster_metadata.
METADATA_TOPIC_ID = uuid.UUID(int=1)

FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 1, 52, 53, 54, 55, 59
API_VERSIONS = 18
# API key -> (min, max) version served on the controller listener.
VERSIONS: dict[int, tuple[int, int]] = {
    FETCH: (13, 16),
    VOTE: (0, 0),
    BEGIN_QUORUM_EPOCH: (0, 0),
    END_QUORUM_EPOCH: (0, 0),
    DESCRIBE_QUORUM: (0, 1),
    FETCH_SNAPSHOT: (0, 0),
}
_KEY_OF_REQUEST = {
    VoteRequest: VOTE,
    BeginQuorumEpochRequest: BEGIN_QUORUM_EPOCH,
    EndQuorumEpochRequest: END_QUORUM_EPOCH,
    FetchRequest: FETCH,
    FetchSnapshotRequest: FETCH_SNAPSHOT,
    DescribeQuorumRequest: DESCRIBE_QUORUM,
}


class WireError(Exception):
    """A request the quorum cannot take; ``code`` is the error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def api_key_of(body) -> int:
    return _KEY_OF_REQUEST[type(body)]


def send_version(api_key: int) -> int:
    """The version this node sends ``api_key`` at (the highest it serves)."""
    return VERSIONS[api_key][1]


# ---------------------------------------------------------------------------------- requests


def request_to_wire(body) -> ApiMessage:
    """The Kafka request for a core request, at :func:`send_version`."""
    api_key = api_key_of(body)
    version = send_version(api_key)
    cls = REQUEST_CLASSES[api_key]
    if isinstance(body, VoteRequest):
        topic = cls.TopicData
        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION,
            candidate_epoch=body.candidate_epoch,
            candidate_id=body.candidate_id,
            last_offset_epoch=body.last_offset_epoch,
            last_offset=body.last_offset,
        )
        message = cls(
            cluster_id=body.cluster_id, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])]
        )
    elif isinstance(body, BeginQuorumEpochRequest):
        topic = cls.TopicData
        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION, leader_id=body.leader_id, leader_epoch=body.leader_epoch
        )
        message = cls(
            cluster_id=body.cluster_id, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])]
        )
    elif isinstance(body, EndQuorumEpochRequest):
        topic = cls.TopicData
        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION,
            leader_id=body.leader_id,
            leader_epoch=body.leader_epoch,
            preferred_successors=list(body.preferred_successors),
        )
        message = cls(
            cluster_id=body.cluster_id, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])]
        )
    elif isinstance(body, FetchRequest):
        topic = cls.FetchTopic
        partition = topic.FetchPartition(
            partition=METADATA_PARTITION,
            current_leader_epoch=body.current_leader_epoch,
            fetch_offset=body.fetch_offset,
            last_fetched_epoch=body.last_fetched_epoch,
            log_start_offset=-1,
            partition_max_bytes=body.max_bytes,
        )
        message = cls(
            cluster_id=body.cluster_id,
            replica_state=cls.ReplicaState(replica_id=body.replica_id, replica_epoch=-1),
            max_wait_ms=body.max_wait_ms,
            min_bytes=0,
            max_bytes=body.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[topic(topic_id=METADATA_TOPIC_ID, partitions=[partition])],
            forgotten_topics_data=[],
            rack_id="",
        )
    elif isinstance(body, FetchSnapshotRequest):
        topic = cls.TopicSnapshot
        partition = topic.PartitionSnapshot(
            partition=METADATA_PARTITION,
            current_leader_epoch=body.current_leader_epoch,
            snapshot_id=topic.PartitionSnapshot.SnapshotId(
                end_offset=body.snapshot_id.offset, epoch=body.snapshot_id.epoch
            ),
            position=body.position,
        )
        message = cls(
            cluster_id=body.cluster_id,
            replica_id=body.replica_id,
            max_bytes=body.max_bytes,
            topics=[topic(name=METADATA_TOPIC, partitions=[partition])],
        )
    else:  # DescribeQuorumRequest
        topic = cls.TopicData
        message = cls(
            topics=[topic(topic_name=METADATA_TOPIC, partitions=[topic.PartitionData(partition_index=0)])]
        )
    message.API_VERSION = version
    return message


def _only_partition(topics, name_of, partition_of, api: str, *, by_id: bool = False):
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise WireError(ErrorCode.INVALID_REQUEST, f"{api} must name exactly one partition")
    topic = topics[0]
    partition = topic.partitions[0]
    expected = METADATA_TOPIC_ID if by_id else METADATA_TOPIC
    if name_of(topic) != expected or partition_of(partition) != METADATA_PARTITION:
        raise WireError(ErrorCode.INVALID_REQUEST, f"{api} is for {METADATA_TOPIC}-0 only")
    return partition


def request_from_wire(api_key: int, message: ApiMessage):
    """The core request for a decoded Kafka request; raises :class:`WireError`."""
    if api_key == VOTE:
        p = _only_partition(message.topics, lambda t: t.topic_name, lambda p: p.partition_index, "Vote")
        return VoteRequest(
            p.candidate_epoch, p.candidate_id, p.last_offset_epoch, p.last_offset, message.cluster_id
        )
    if api_key == BEGIN_QUORUM_EPOCH:
        p = _only_partition(
            message.topics, lambda t: t.topic_name, lambda p: p.partition_index, "BeginQuorumEpoch"
        )
        return BeginQuorumEpochRequest(p.leader_id, p.leader_epoch, message.cluster_id)
    if api_key == END_QUORUM_EPOCH:
        p = _only_partition(
            message.topics, lambda t: t.topic_name, lambda p: p.partition_index, "EndQuorumEpoch"
        )
        return EndQuorumEpochRequest(
            p.leader_id, p.leader_epoch, tuple(p.preferred_successors or ()), message.cluster_id
        )
    if api_key == FETCH:
        p = _only_partition(message.topics, lambda t: t.topic_id, lambda p: p.partition, "Fetch", by_id=True)
        state = message.replica_state
        replica_id = state.replica_id if state is not None else -1
        return FetchRequest(
            replica_id,
            p.current_leader_epoch,
            p.fetch_offset,
            p.last_fetched_epoch,
            message.max_wait_ms,
            min(message.max_bytes, p.partition_max_bytes),
            message.cluster_id,
        )
    if api_key == FETCH_SNAPSHOT:
        p = _only_partition(message.topics, lambda t: t.name, lambda p: p.partition, "FetchSnapshot")
        snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return FetchSnapshotRequest(
            message.replica_id,
            p.current_leader_epoch,
            snapshot_id,
            p.position,
            message.max_bytes,
            message.cluster_id,
        )
    if api_key == DESCRIBE_QUORUM:
        try:
            _only_partition(
                message.topics, lambda t: t.topic_name, lambda p: p.partition_index, "DescribeQuorum"
            )
        except WireError as exc:
            raise WireError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
        return DescribeQuorumRequest()
    raise WireError(ErrorCode.INVALID_REQUEST, f"API {api_key} is not served on the controller listener")


# ---------------------------------------------------------------------------------- responses


def response_to_wire(api_key: int, version: int, body) -> ApiMessage:
    """The Kafka response for a core response at ``version``."""
    cls = RESPONSE_CLASSES[api_key]
    if isinstance(body, VoteResponse):
        topic = cls.TopicData
        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=body.error,
            leader_id=body.leader_id,
            leader_epoch=body.leader_epoch,
            vote_granted=body.vote_granted,
        )
        message = cls(error_code=0, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])])
    elif isinstance(body, BeginQuorumEpochResponse | EndQuorumEpochResponse):
        topic = cls.TopicData
        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=body.error,
            leader_id=body.leader_id,
            leader_epoch=body.leader_epoch,
        )
        message = cls(error_code=0, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])])
    elif isinstance(body, FetchResponse):
        topic = cls.FetchableTopicResponse
        data = topic.PartitionData
        diverging = body.diverging_epoch
        snapshot = body.snapshot_id
        partition = data(
            partition_index=METADATA_PARTITION,
            error_code=body.error,
            high_watermark=body.high_watermark,
            last_stable_offset=body.high_watermark,
            log_start_offset=body.log_start_offset,
            # Tagged fields: left out when there is nothing to say, as Kafka's writer does.
            diverging_epoch=None
            if diverging is None
            else data.EpochEndOffset(epoch=diverging.epoch, end_offset=diverging.offset),
            current_leader=data.LeaderIdAndEpoch(leader_id=body.leader_id, leader_epoch=body.leader_epoch),
            snapshot_id=None
            if snapshot is None
            else data.SnapshotId(end_offset=snapshot.offset, epoch=snapshot.epoch),
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=batch_codec.encode_all(body.batches),
        )
        message = cls(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[topic(topic_id=METADATA_TOPIC_ID, partitions=[partition])],
            node_endpoints=[],
        )
    elif isinstance(body, FetchSnapshotResponse):
        topic = cls.TopicSnapshot
        snapshot = body.snapshot_id
        part = topic.PartitionSnapshot
        partition = part(
            index=METADATA_PARTITION,
            error_code=body.error,
            snapshot_id=part.SnapshotId(
                end_offset=-1 if snapshot is None else snapshot.offset,
                epoch=-1 if snapshot is None else snapshot.epoch,
            ),
            current_leader=part.LeaderIdAndEpoch(leader_id=body.leader_id, leader_epoch=body.leader_epoch),
            size=body.size,
            position=body.position,
            unaligned_records=body.data,
        )
        message = cls(
            throttle_time_ms=0, error_code=0, topics=[topic(name=METADATA_TOPIC, partitions=[partition])]
        )
    elif isinstance(body, DescribeQuorumResponse):
        topic = cls.TopicData
        state = topic.PartitionData.ReplicaState

        def replicas(described: tuple[ReplicaDescription, ...]) -> list:
            return [
                state(
                    replica_id=r.replica_id,
                    log_end_offset=r.log_end_offset,
                    last_fetch_timestamp=r.last_fetch_timestamp,
                    last_caught_up_timestamp=r.last_caught_up_timestamp,
                )
                for r in described
            ]

        partition = topic.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=body.error,
            leader_id=body.leader_id,
            leader_epoch=body.leader_epoch,
            high_watermark=body.high_watermark,
            current_voters=replicas(body.voters),
            observers=replicas(body.observers),
        )
        message = cls(error_code=0, topics=[topic(topic_name=METADATA_TOPIC, partitions=[partition])])
    else:
        raise TypeError(f"not a quorum response: {body!r}")
    message.API_VERSION = version
    return message


def error_response(api_key: int, version: int, code: ErrorCode) -> ApiMessage:
    """Kafka's answer to a request that could not be taken: the error at the top (DescribeQuorum:
    in its one partition), nothing else."""
    cls = RESPONSE_CLASSES[api_key]
    if api_key == DESCRIBE_QUORUM:
        return response_to_wire(api_key, version, DescribeQuorumResponse(int(code), -1, -1, -1))
    if api_key == FETCH:
        message = cls(throttle_time_ms=0, error_code=int(code), session_id=0, responses=[], node_endpoints=[])
    elif api_key == FETCH_SNAPSHOT:
        message = cls(throttle_time_ms=0, error_code=int(code), topics=[])
    else:
        message = cls(error_code=int(code), topics=[])
    message.API_VERSION = version
    return message


def _one(topics, what: str):
    if not topics or not topics[0].partitions:
        return None
    return topics[0].partitions[0]


def response_from_wire(api_key: int, message: ApiMessage):
    """The core response for a decoded Kafka response. A top-level error, or an answer about no
    partition, raises :class:`WireError`: the request failed (the driver backs off and retries)."""
    top = message.error_code
    partitions = message.responses if api_key == FETCH else message.topics
    if top or not partitions or not partitions[0].partitions:
        if api_key == DESCRIBE_QUORUM and not top and partitions:
            pass
        else:
            raise WireError(
                ErrorCode(top or ErrorCode.UNKNOWN_SERVER_ERROR), f"API {api_key} answered with error {top}"
            )
    if api_key == VOTE:
        p = _one(message.topics, "Vote")
        if top or p is None:
            return VoteResponse(top or ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, False)
        return VoteResponse(p.error_code, p.leader_id, p.leader_epoch, bool(p.vote_granted))
    if api_key in (BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH):
        kind = BeginQuorumEpochResponse if api_key == BEGIN_QUORUM_EPOCH else EndQuorumEpochResponse
        p = _one(message.topics, "EpochResponse")
        if top or p is None:
            return kind(top or ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)
        return kind(p.error_code, p.leader_id, p.leader_epoch)
    if api_key == FETCH:
        p = _one(message.responses, "Fetch")
        if top or p is None:
            return FetchResponse(top or ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, -1, -1)
        diverging = p.diverging_epoch
        snapshot = p.snapshot_id
        leader = p.current_leader
        return FetchResponse(
            p.error_code,
            leader.leader_id if leader is not None else -1,
            leader.leader_epoch if leader is not None else -1,
            p.high_watermark,
            p.log_start_offset,
            tuple(batch_codec.decode(p.records or b"")),
            OffsetAndEpoch(diverging.end_offset, diverging.epoch)
            if diverging is not None and diverging.epoch >= 0
            else None,
            OffsetAndEpoch(snapshot.end_offset, snapshot.epoch)
            if snapshot is not None and snapshot.end_offset >= 0 and snapshot.epoch >= 0
            else None,
        )
    if api_key == FETCH_SNAPSHOT:
        p = _one(message.topics, "FetchSnapshot")
        if top or p is None:
            return FetchSnapshotResponse(top or ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1)
        leader = p.current_leader
        snapshot = p.snapshot_id
        return FetchSnapshotResponse(
            p.error_code,
            leader.leader_id if leader is not None else -1,
            leader.leader_epoch if leader is not None else -1,
            OffsetAndEpoch(snapshot.end_offset, snapshot.epoch) if snapshot.end_offset >= 0 else None,
            p.size,
            p.position,
            bytes(p.unaligned_records or b""),
        )
    if api_key == DESCRIBE_QUORUM:
        p = _one(message.topics, "DescribeQuorum")
        if top or p is None:
            return DescribeQuorumResponse(top or ErrorCode.UNKNOWN_SERVER_ERROR, -1, -1, -1)

        def described(replicas) -> tuple[ReplicaDescription, ...]:
            return tuple(
                ReplicaDescription(
                    r.replica_id,
                    r.log_end_offset,
                    getattr(r, "last_fetch_timestamp", -1),
                    getattr(r, "last_caught_up_timestamp", -1),
                )
                for r in replicas or ()
            )

        return DescribeQuorumResponse(
            p.error_code,
            p.leader_id,
            p.leader_epoch,
            p.high_watermark,
            described(p.current_voters),
            described(p.observers),
        )
    raise WireError(ErrorCode.INVALID_REQUEST, f"API {api_key} is not a quorum RPC")
