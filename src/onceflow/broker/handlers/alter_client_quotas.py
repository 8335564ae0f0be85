"""AlterClientQuotas (49, KIP-546): set or remove producer/consumer byte rates and request percentages
of users, client-ids and their defaults (``kafka-configs --alter --entity-type clients|users``,
``onceflow quotas set``).

Each entry gets its own answer, checked as Kafka's controller checks it: INVALID_REQUEST for an
empty, repeated or unknown entity type, an empty name, an unknown key, a value not above 0, a
fractional byte rate, a key given twice, or an entity given twice. The valid entries are saved
together (``quotas.store``) before the answer goes out; ``validate_only`` checks and changes nothing.
A store that cannot be written answers KAFKA_STORAGE_ERROR for every entry that would have changed.
Needs ALTER_CONFIGS on the cluster, else every entry is CLUSTER_AUTHORIZATION_FAILED.

On a cluster broker the quotas are the metadata image's: the request goes on to the active
controller (which checks it the same way), and the answer once this broker's image has the change.
"""

from __future__ import annotations

import logging
from collections import Counter

from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse

from onceflow.broker.context import RequestContext
from onceflow.broker.forwarding import forward, wait_visible
from onceflow.broker.quotas.entities import Entity, check_ops, entity
from onceflow.broker.security.access import ALTER_CONFIGS, CLUSTER, authorize
from onceflow.protocol.errors import ErrorCode, InvalidRequest, KafkaError

log = logging.getLogger(__name__)

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1
REQUEST = AlterClientQuotasRequest

_Entry = AlterClientQuotasResponse.EntryData
_EntityData = _Entry.EntityData


async def _forwarded(ctx: RequestContext, request, changes) -> AlterClientQuotasResponse:
    """A cluster broker: the active controller decides (and checks) the change; the answer goes once
    this broker's image has the valid entries' new values."""
    try:
        response = await forward(ctx, request)
    except KafkaError as exc:
        return AlterClientQuotasResponse(
            throttle_time_ms=0,
            entries=[
                _Entry(
                    error_code=int(exc.code),
                    error_message=str(exc),
                    entity=[
                        _EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in item.entity
                    ],
                )
                for item in request.entries or []
            ],
        )
    if not request.validate_only and changes:
        expected = {}
        for quota_entity, ops in changes:
            values = dict(ctx.metadata.image.quotas(quota_entity))
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            expected[quota_entity] = values
        await wait_visible(ctx, lambda image: all(dict(image.quotas(e)) == v for e, v in expected.items()))
    return response


async def handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    entries = request.entries or []
    if not authorize(ctx, ALTER_CONFIGS, CLUSTER):
        return _answer(entries, [(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), None)] * len(entries))
    parsed: list[Entity | None] = []
    for item in entries:
        try:
            parsed.append(entity((e.entity_type, e.entity_name) for e in item.entity))
        except KafkaError:
            parsed.append(None)
    repeated = {e for e, count in Counter(e for e in parsed if e is not None).items() if count > 1}

    results: list[tuple[int, str | None]] = []
    changes = []
    for item, quota_entity in zip(entries, parsed, strict=True):
        try:
            if quota_entity is None:  # raise its error again, now for this entry's answer
                entity((e.entity_type, e.entity_name) for e in item.entity)
            if quota_entity in repeated:
                raise InvalidRequest(f"Ignoring duplicate entity {quota_entity}")
            changes.append((quota_entity, check_ops((op.key, op.value, op.remove) for op in item.ops)))
            results.append((int(ErrorCode.NONE), None))
        except KafkaError as exc:
            results.append((int(exc.code), str(exc)))
    if ctx.services.quotas_from_metadata:
        return await _forwarded(ctx, request, changes)
    try:
        ctx.quotas.alter(changes, validate_only=bool(request.validate_only))
    except OSError as exc:
        log.exception("could not save client quotas")
        results = [
            (int(ErrorCode.KAFKA_STORAGE_ERROR), f"could not save client quotas: {exc}")
            if code == 0
            else (code, message)
            for code, message in results
        ]
    return _answer(entries, results)


def _answer(entries, results: list[tuple[int, str | None]]) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(
        throttle_time_ms=0,
        entries=[
            _Entry(
                error_code=code,
                error_message=message,
                entity=[
                    _EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in item.entity
                ],
            )
            for item, (code, message) in zip(entries, results, strict=True)
        ],
    )
