"""Request and response classes for APIs kafka-python has no schema for, built by its ``ApiMessage``
from our JSON schemas in :mod:`onceflow.protocol.schemas`: the KIP-848 group APIs, the APIs a broker
sends to the KRaft controller (registration, heartbeats, AlterPartition, producer-id blocks,
forwarded admin requests in an Envelope), and the quorum's Vote, BeginQuorumEpoch, EndQuorumEpoch
and FetchSnapshot (served on the controller listener by ``onceflow.raft``)."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import onceflow.protocol.schemas as _schemas

__all__ = [
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResponse",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "EnvelopeRequest",
    "EnvelopeResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "UnregisterBrokerRequest",
    "UnregisterBrokerResponse",
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


class AllocateProducerIdsRequest(ApiMessage, load_json=_schemas):
    pass


class AllocateProducerIdsResponse(ApiMessage, load_json=_schemas):
    pass


class AlterPartitionRequest(ApiMessage, load_json=_schemas):
    pass


class AlterPartitionResponse(ApiMessage, load_json=_schemas):
    pass


class BrokerHeartbeatRequest(ApiMessage, load_json=_schemas):
    pass


class BrokerHeartbeatResponse(ApiMessage, load_json=_schemas):
    pass


class BrokerRegistrationRequest(ApiMessage, load_json=_schemas):
    pass


class BrokerRegistrationResponse(ApiMessage, load_json=_schemas):
    pass


class EnvelopeRequest(ApiMessage, load_json=_schemas):
    pass


class EnvelopeResponse(ApiMessage, load_json=_schemas):
    pass


class UnregisterBrokerRequest(ApiMessage, load_json=_schemas):
    pass


class UnregisterBrokerResponse(ApiMessage, load_json=_schemas):
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
