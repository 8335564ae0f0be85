"""Request and response classes for APIs kafka-python has no schema for, built by its ``ApiMessage``
from our JSON schemas in :mod:`onceflow.protocol.schemas`: the KIP-848 consumer group APIs the
broker serves, and the quorum's Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot (served on
the controller listener by ``onceflow.raft``)."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import onceflow.protocol.schemas as _schemas

__all__ = [
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "VoteRequest",
    "VoteResponse",
]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_schemas):
    pass


class VoteRequest(ApiMessage, load_json=_schemas):
    pass


class VoteResponse(ApiMessage, load_json=_schemas):
    pass


class BeginQuorumEpochRequest(ApiMessage, load_json=_schemas):
    pass


class BeginQuorumEpochResponse(ApiMessage, load_json=_schemas):
    pass


class EndQuorumEpochRequest(ApiMessage, load_json=_schemas):
    pass


class EndQuorumEpochResponse(ApiMessage, load_json=_schemas):
    pass


class FetchSnapshotRequest(ApiMessage, load_json=_schemas):
    pass


class FetchSnapshotResponse(ApiMessage, load_json=_schemas):
    pass
