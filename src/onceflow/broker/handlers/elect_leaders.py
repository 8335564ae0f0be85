"""ElectLeaders (43), KIP-460: with one broker every partition already has its preferred leader (the
only replica), so, as Kafka's controller answers then, each requested partition gets
ELECTION_NOT_NEEDED (for both election types: the unclean one is needed only by a partition without a
leader), and a partition that does not exist UNKNOWN_TOPIC_OR_PARTITION. A null partition list asks
for every partition, and then, as in Kafka, partitions that need no election are left out of the
answer: every topic is listed, with no partitions. An election type other than preferred (0) or
unclean (1) fails the whole request with INVALID_REQUEST. Needs ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED for the request and each partition."""

from __future__ import annotations

from kafka.protocol.admin import ElectLeadersRequest, ElectLeadersResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import ALTER, CLUSTER, authorize
from onceflow.protocol.errors import ErrorCode

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


def _partition_error(ctx: RequestContext, topic: str, partition: int) -> tuple[ErrorCode, str | None]:
    found = ctx.topics.get(topic)
    if found is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    if not 0 <= partition < len(found.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
    return ErrorCode.ELECTION_NOT_NEEDED, None


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
    if wanted is None:
        results = [_answer(topic.name, []) for topic in ctx.topics]
    else:
        results = [
            _answer(t.topic, [(p, *_partition_error(ctx, t.topic, p)) for p in t.partitions]) for t in wanted
        ]
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=results)
