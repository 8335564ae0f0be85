"""Request and response classes for APIs kafka-python has no schema for, built by its ``ApiMessage``
from our JSON schemas in :mod:`onceflow.protocol.schemas`."""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

import onceflow.protocol.schemas as _schemas

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_schemas):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_schemas):
    pass
