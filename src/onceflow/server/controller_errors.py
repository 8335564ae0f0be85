"""The answer a controller gives to a request it cannot run (NOT_CONTROLLER on a standby, or an error
before the operation starts): each API carries the code where its clients look for it."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
)

from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    UnregisterBrokerResponse,
)


def _configs_answer(response_cls: Any, request: Any, code: int, message: str) -> Any:
    return response_cls(
        throttle_time_ms=0,
        responses=[
            response_cls.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources or []
        ],
    )


def error_answer(api_key: int, request: Any, error: ErrorCode, message: str) -> Any:
    code = int(error)
    if api_key == 19:
        return CreateTopicsResponse(
            throttle_time_ms=0,
            topics=[
                CreateTopicsResponse.CreatableTopicResult(
                    name=t.name,
                    topic_id=None,
                    error_code=code,
                    error_message=message,
                    topic_config_error_code=0,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=[],
                )
                for t in request.topics
            ],
        )
    if api_key == 20:
        names = [(t.name, t.topic_id) for t in request.topics or []] or [
            (n, None) for n in request.topic_names or []
        ]
        return DeleteTopicsResponse(
            throttle_time_ms=0,
            responses=[
                DeleteTopicsResponse.DeletableTopicResult(
                    name=name, topic_id=topic_id, error_code=code, error_message=message
                )
                for name, topic_id in names
            ],
        )
    if api_key == 33:
        return _configs_answer(AlterConfigsResponse, request, code, message)
    if api_key == 44:
        return _configs_answer(IncrementalAlterConfigsResponse, request, code, message)
    if api_key == 37:
        return CreatePartitionsResponse(
            throttle_time_ms=0,
            results=[
                CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=t.name, error_code=code, error_message=message
                )
                for t in request.topics
            ],
        )
    if api_key == 43:
        return ElectLeadersResponse(throttle_time_ms=0, error_code=code, replica_election_results=[])
    if api_key == 49:
        entry = AlterClientQuotasResponse.EntryData
        return AlterClientQuotasResponse(
            throttle_time_ms=0,
            entries=[
                entry(
                    error_code=code,
                    error_message=message,
                    entity=[
                        entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                        for e in item.entity
                    ],
                )
                for item in request.entries or []
            ],
        )
    if api_key == 56:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=code, topics=[])
    if api_key == 62:
        return BrokerRegistrationResponse(throttle_time_ms=0, error_code=code, broker_epoch=-1)
    if api_key == 63:
        return BrokerHeartbeatResponse(
            throttle_time_ms=0, error_code=code, is_caught_up=False, is_fenced=True, should_shut_down=False
        )
    if api_key == 64:
        return UnregisterBrokerResponse(throttle_time_ms=0, error_code=code, error_message=message)
    if api_key == 67:
        return AllocateProducerIdsResponse(
            throttle_time_ms=0, error_code=code, producer_id_start=-1, producer_id_len=0
        )
    raise ValueError(f"no error answer for API {api_key}")
