"""ElectLeaders (43), KIP-460: preferred (0) or unclean (1) leader elections, decided by the active
controller (``broker.forwarding``; its rules are in docs/controller.md): ELECTION_NOT_NEEDED for a
partition already led as asked, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist. A null
partition list asks for every partition, and then, as in Kafka, partitions that need no election are
left out of the answer. An election type other than preferred or unclean fails the whole request
with INVALID_REQUEST, here, before anything is sent on. Needs ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED for the request and each partition."""

from __future__ import annotations

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = ElectLeadersRequest

PREFERRED, UNCLEAN = 0, 1

_TopicResult = ElectLeadersResponse.ReplicaElectionResult
_PartitionResult = _TopicResult.PartitionResult


def _answer(topic: str, partitions: list[tuple[int, ErrorCode, str | None]]) -> _TopicResult:
    return _TopicResult(
        topic=topic,
        partition_result=[
            _PartitionResult(partition_id=p, error_code=int(code), error_message=message)
            for p, code, message in partitions
        ],
    )


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    # v0 has no election type: it always asks for the preferred leader.
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    wanted = request.topic_partitions
    if not authorize(ctx, ALTER, CLUSTER):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        results = [_answer(t.topic, [(p, denied, None) for p in t.partitions]) for t in wanted or []]
        return ElectLeadersResponse(
            throttle_time_ms=0, error_code=int(denied), replica_election_results=results
        )
    if election_type not in (PREFERRED, UNCLEAN):
        message = f"Unknown election type {election_type}"
        results = [
            _answer(t.topic, [(p, ErrorCode.INVALID_REQUEST, message) for p in t.partitions])
            for t in wanted or []
        ]
        return ElectLeadersResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST), replica_election_results=results
        )
    if ctx.api_version == 0:
        request.election_type = PREFERRED
    try:
        return await forward(ctx, request)
    except KafkaError as exc:
        return ElectLeadersResponse(
            throttle_time_ms=0, error_code=int(error_code_for(exc)), replica_election_results=[]
        )
