"""Which controller operation answers which API, at which versions (the controller's API table).

Used both for requests that arrive on the controller listener and for a combined node's broker
calling its own active controller in process. Versions are those our request classes (kafka-python's
and ``protocol.messages``) encode, capped at what the controller's code handles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterConfigsRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)

from onceflow.controller.config import ControllerResult
from onceflow.controller.quorum_controller import QuorumController
from onceflow.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    UnregisterBrokerRequest,
)


@dataclass(frozen=True, slots=True)
class ControllerApi:
    api_key: int
    min_version: int
    max_version: int
    request_class: Any
    # (controller, request, version) -> the operation to run at now_ms
    operation: Callable[[QuorumController, Any, int], Callable[[int], ControllerResult]]


def _simple(method: str):
    def bind(controller: QuorumController, request: Any, _version: int):
        return lambda now_ms: getattr(controller, method)(request, now_ms)

    return bind


def _versioned(method: str):
    def bind(controller: QuorumController, request: Any, version: int):
        return lambda now_ms: getattr(controller, method)(request, now_ms, version)

    return bind


CONTROLLER_APIS = {
    api.api_key: api
    for api in (
        ControllerApi(19, 2, 7, CreateTopicsRequest, _simple("create_topics")),
        ControllerApi(20, 1, 6, DeleteTopicsRequest, _versioned("delete_topics")),
        ControllerApi(30, 1, 3, CreateAclsRequest, _simple("create_acls")),
        ControllerApi(31, 1, 3, DeleteAclsRequest, _simple("delete_acls")),
        ControllerApi(33, 0, 2, AlterConfigsRequest, _simple("alter_configs")),
        ControllerApi(37, 0, 3, CreatePartitionsRequest, _simple("create_partitions")),
        ControllerApi(43, 0, 2, ElectLeadersRequest, _simple("elect_leaders")),
        ControllerApi(44, 0, 1, IncrementalAlterConfigsRequest, _simple("incremental_alter_configs")),
        ControllerApi(49, 0, 1, AlterClientQuotasRequest, _simple("alter_client_quotas")),
        ControllerApi(51, 0, 0, AlterUserScramCredentialsRequest, _simple("alter_user_scram_credentials")),
        ControllerApi(56, 0, 3, AlterPartitionRequest, _versioned("alter_partition")),
        ControllerApi(62, 0, 3, BrokerRegistrationRequest, _simple("register_broker")),
        ControllerApi(63, 0, 1, BrokerHeartbeatRequest, _simple("broker_heartbeat")),
        ControllerApi(64, 0, 0, UnregisterBrokerRequest, _simple("unregister_broker")),
        ControllerApi(67, 0, 0, AllocateProducerIdsRequest, _simple("allocate_producer_ids")),
    )
}


def operation_for(controller: QuorumController, api_key: int, request: Any, version: int):
    """The operation answering ``request`` (an API of :data:`CONTROLLER_APIS`)."""
    return CONTROLLER_APIS[api_key].operation(controller, request, version)
