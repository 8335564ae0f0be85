"""The quorum's RPCs as the core sees them: small frozen values, one per request and response.

They carry what Kafka's KIP-595/KIP-630 messages carry for the one partition ``__cluster_metadata-0``
(``wire`` converts them to and from Kafka's wire schemas), so the simulator can pass them between
nodes without encoding. Error fields hold Kafka error codes (``ErrorCode``); an answer also says who
its sender believes leads and in which epoch, which is how nodes learn of elections.

Envelopes: the core receives :class:`Inbound` (a request, or the response to one of its requests) and
emits :class:`Outbound`. A request it sends names its ``destination`` node; a response it sends
carries the ``reply_to`` token its request came with (opaque to the core: a connection, in the
asyncio driver).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from onceflow.protocol.errors import ErrorCode
from onceflow.raft.records import Batch, OffsetAndEpoch

NONE = int(ErrorCode.NONE)
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int  # -1: not a replica
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: int
    leader_id: int
    leader_epoch: int
    high_watermark: int  # -1: not known yet (a new leader before its first commit)
    log_start_offset: int
    batches: tuple[Batch, ...] = ()
    # Set when the fetch offset and epoch do not match the leader's log: truncate to this first.
    diverging_epoch: OffsetAndEpoch | None = None
    # Set when what the follower needs is below the leader's log start: fetch this snapshot.
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error: int
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = -1
    position: int = -1
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    pass


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One voter's or observer's progress as the leader sees it (DescribeQuorum's ReplicaState)."""

    replica_id: int
    log_end_offset: int  # -1: not known
    last_fetch_timestamp: int  # -1: never fetched in this epoch
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()


REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
)
RESPONSE_TYPES = (
    VoteResponse,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    DescribeQuorumResponse,
)


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message arriving at the node: a request (answer it to ``reply_to``) or the response to a
    request the node sent to ``source`` with ``correlation_id``."""

    source: int
    correlation_id: int
    body: Any
    reply_to: Hashable = None


@dataclass(frozen=True, slots=True)
class Outbound:
    """A message the node wants sent: a request to node ``destination``, or a response to the
    request that came with ``reply_to``."""

    destination: int
    correlation_id: int
    body: Any
    reply_to: Hashable = None

    @property
    def is_response(self) -> bool:
        return isinstance(self.body, RESPONSE_TYPES)
