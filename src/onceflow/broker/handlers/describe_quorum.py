"""DescribeQuorum (55): the metadata quorum's leader, epoch, high watermark, and each voter's and
observer's log end offset and last fetch, as the quorum's leader knows them (``kafka-metadata-quorum
describe``, ``onceflow metadata-quorum describe``). A broker asks the leader (``ctx.controller``).
Needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import CLUSTER, DESCRIBE, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for
from onceflow.protocol.internal_topics import CLUSTER_METADATA_TOPIC

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 1

REQUEST = DescribeQuorumRequest
METADATA_TOPIC = CLUSTER_METADATA_TOPIC

_Topic = DescribeQuorumResponse.TopicData
_Partition = _Topic.PartitionData
_Replica = _Partition.ReplicaState


def response_for(description, version: int) -> DescribeQuorumResponse:
    """A DescribeQuorum answer from the quorum's own description (``server.quorum.QuorumDescription``)."""

    def replicas(states):
        return [
            _Replica(
                replica_id=r.replica_id,
                log_end_offset=r.log_end_offset,
                last_fetch_timestamp=r.last_fetch_timestamp,
                last_caught_up_timestamp=r.last_caught_up_timestamp,
            )
            for r in states
        ]

    return DescribeQuorumResponse(
        error_code=0,
        topics=[
            _Topic(
                topic_name=METADATA_TOPIC,
                partitions=[
                    _Partition(
                        partition_index=0,
                        error_code=0,
                        leader_id=description.leader_id,
                        leader_epoch=description.leader_epoch,
                        high_watermark=description.high_watermark,
                        current_voters=replicas(description.voters),
                        observers=replicas(description.observers),
                    )
                ],
            )
        ],
    )


def error_response(code: ErrorCode, message: str | None = None) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(error_code=int(code), error_message=message, topics=[])


async def handle(ctx: RequestContext, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    if not authorize(ctx, DESCRIBE, CLUSTER):
        return error_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        return await ctx.controller.describe_quorum(ctx.api_version)
    except KafkaError as exc:
        return error_response(error_code_for(exc), str(exc))
