"""DescribeClientQuotas (48, KIP-546): the quotas of the entities a filter matches
(``kafka-configs --describe --entity-type clients|users``, ``onceflow quotas describe``).

The filter is Kafka's: per entity type, an exact name, the default, or any specified entity; with
``strict`` an entity must have exactly the filtered types. A bad filter (a type twice, a match string
where none belongs, ip mixed with user or client-id) is INVALID_REQUEST; an unknown entity type is
UNSUPPORTED_VERSION, as in Kafka. Needs DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kafka.protocol.admin import DescribeClientQuotasRequest, DescribeClientQuotasResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.quotas.entities import Filter
from onceflow.broker.security.access import CLUSTER, DESCRIBE_CONFIGS, authorize
from onceflow.protocol.errors import ErrorCode, KafkaError

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = DescribeClientQuotasRequest

_Entry = DescribeClientQuotasResponse.EntryData


async def handle(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not authorize(ctx, DESCRIBE_CONFIGS, CLUSTER):
        return DescribeClientQuotasResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            error_message=None,
            entries=None,
        )
    try:
        quota_filter = Filter(
            ((c.entity_type, c.match_type, c.match) for c in request.components or []), bool(request.strict)
        )
    except KafkaError as exc:
        return DescribeClientQuotasResponse(
            throttle_time_ms=0, error_code=int(exc.code), error_message=str(exc), entries=None
        )
    described = ctx.quotas.describe(quota_filter)
    return DescribeClientQuotasResponse(
        throttle_time_ms=0,
        error_code=int(ErrorCode.NONE),
        error_message=None,
        entries=[
            _Entry(
                entity=[_Entry.EntityData(entity_type=t, entity_name=n) for t, n in quota_entity],
                values=[_Entry.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            )
            for quota_entity, values in described
        ],
    )
