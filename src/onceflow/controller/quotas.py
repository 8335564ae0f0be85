"""Client quotas: AlterClientQuotas (49) as ClientQuotaRecords (Kafka's ``ClientQuotaControlManager``).

An entity is a user, a client id, both, or an IP address (a None name is the default for that
type); each operation sets or removes one quota key. Entities and keys are checked as Kafka does
(INVALID_REQUEST): known types, no type twice, ``ip`` alone, keys that apply to the entity, values
that are numbers (positive integers for the rate keys that are whole numbers). The broker-side
quota enforcement reads these from the image (``MetadataImage.client_quotas``).
"""

from __future__ import annotations

import math

from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse

from onceflow.metadata.records import ClientQuotaRecord, EntityData
from onceflow.protocol.errors import ErrorCode, KafkaError

USER, CLIENT_ID, IP = "user", "client-id", "ip"
CLIENT_KEYS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
IP_KEYS = frozenset({"connection_creation_rate"})
_WHOLE_NUMBER_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"})


def _check_entity(entity) -> tuple[EntityData, ...]:
    types = [e.entity_type for e in entity]
    if not types:
        raise KafkaError("Invalid empty client quota entity", ErrorCode.INVALID_REQUEST)
    if len(set(types)) != len(types):
        raise KafkaError(f"Duplicate entity type in {types}", ErrorCode.INVALID_REQUEST)
    for entity_type in types:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(f"Unhandled client quota entity type: {entity_type}", ErrorCode.INVALID_REQUEST)
    if IP in types and len(types) > 1:
        raise KafkaError(
            "Invalid quota entity combination: ip cannot be combined with user or client-id",
            ErrorCode.INVALID_REQUEST,
        )
    return tuple(EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entity)


def _check_op(is_ip: bool, op) -> None:
    allowed = IP_KEYS if is_ip else CLIENT_KEYS
    if op.key not in allowed:
        raise KafkaError(f"Invalid configuration key {op.key}", ErrorCode.INVALID_REQUEST)
    if op.remove:
        return
    if math.isnan(op.value) or op.value <= 0:
        raise KafkaError(
            f"Invalid value {op.value} for {op.key}: it must be positive", ErrorCode.INVALID_REQUEST
        )
    if op.key in _WHOLE_NUMBER_KEYS and op.value != int(op.value):
        raise KafkaError(
            f"Invalid value {op.value} for {op.key}: it must be a whole number", ErrorCode.INVALID_REQUEST
        )


def alter_client_quotas(request: AlterClientQuotasRequest) -> tuple[list, AlterClientQuotasResponse]:
    records: list = []
    answers = []
    for entry in request.entries:
        try:
            entity = _check_entity(entry.entity)
            is_ip = entity[0].entity_type == IP
            keys = [op.key for op in entry.ops]
            if len(set(keys)) != len(keys):
                raise KafkaError(
                    "A quota key appears more than once for one entity.", ErrorCode.INVALID_REQUEST
                )
            for op in entry.ops:
                _check_op(is_ip, op)
            records.extend(
                ClientQuotaRecord(
                    entity=entity, key=op.key, value=0.0 if op.remove else op.value, remove=op.remove
                )
                for op in entry.ops
            )
            code, message = 0, None
        except KafkaError as exc:
            code, message = int(exc.code), str(exc)
        answers.append(
            AlterClientQuotasResponse.EntryData(
                error_code=code,
                error_message=message,
                entity=[
                    AlterClientQuotasResponse.EntryData.EntityData(
                        entity_type=e.entity_type, entity_name=e.entity_name
                    )
                    for e in entry.entity
                ],
            )
        )
    if request.validate_only:
        records = []
    return records, AlterClientQuotasResponse(throttle_time_ms=0, entries=answers)
