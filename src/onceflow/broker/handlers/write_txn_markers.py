"""WriteTxnMarkers (27): append COMMIT/ABORT control batches to partitions this broker leads.

The coordinator of this broker writes its markers locally (``txn.service.LocalMarkerWriter``); this
API is the same append for a marker request from outside (tools, other coordinators). Needs ALTER or
CLUSTER_ACTION on the cluster, else every partition is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.security.access import ALTER, CLUSTER, CLUSTER_ACTION, authorize
from onceflow.broker.txn.service import write_marker
from onceflow.protocol.errors import ErrorCode, KafkaError, error_code_for

log = logging.getLogger(__name__)

API_KEY = 27
MIN_VERSION = 0
MAX_VERSION = 2
REQUEST = WriteTxnMarkersRequest

_Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
_TopicResult = _Result.WritableTxnMarkerTopicResult
_PartitionResult = _TopicResult.WritableTxnMarkerPartitionResult


def _write_one(ctx: RequestContext, marker, topic: str, partition: int) -> ErrorCode:
    try:
        write_marker(
            ctx.topics,
            ctx.groups,
            topic,
            partition,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            commit=bool(marker.transaction_result),
            coordinator_epoch=marker.coordinator_epoch,
        )
    except KafkaError as exc:
        return error_code_for(exc)
    except OSError:
        log.exception("marker append to %s-%d failed", topic, partition)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    allowed = authorize(ctx, ALTER, CLUSTER, log_denied=False) or authorize(ctx, CLUSTER_ACTION, CLUSTER)
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    results = []
    for marker in request.markers or []:
        topics = [
            _TopicResult(
                name=t.name,
                partitions=[
                    _PartitionResult(
                        partition_index=p,
                        error_code=int(_write_one(ctx, marker, t.name, p) if allowed else denied),
                    )
                    for p in t.partition_indexes or []
                ],
            )
            for t in marker.topics or []
        ]
        results.append(_Result(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)
