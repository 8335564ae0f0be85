"""FindCoordinator (10): which broker coordinates a group (key type 0) or a transactional id (1).

The one lookup every part of the client uses (the consumer's group coordinator, the producer's
transaction and group coordinators, the admin client). It speaks every version up to 6: from v4
(KIP-699) keys go in a list and the answer is a list of coordinators, of which we ask one at a time.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka.protocol.metadata import FindCoordinatorRequest

from onceflow.client.connection import Connection
from onceflow.protocol.errors import ErrorCode, KafkaError

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
MAX_VERSION = 6
_FIRST_BATCHED_VERSION = 4


class CoordinatorAddress(NamedTuple):
    node_id: int
    host: str
    port: int


async def find_coordinator(conn: Connection, key: str, key_type: int = KEY_TYPE_GROUP) -> CoordinatorAddress:
    """Ask the broker at ``conn`` for the coordinator of ``key``; raises the answer's error (for
    example COORDINATOR_NOT_AVAILABLE while the coordinator is loading or moving)."""
    version = min(conn.version_for(FindCoordinatorRequest), MAX_VERSION)
    if version >= _FIRST_BATCHED_VERSION:
        response = await conn.send(
            FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), version=version
        )
        entry = response.coordinators[0]
        code, node, host, port = entry.error_code, entry.node_id, entry.host, entry.port
        message = entry.error_message
    else:
        response = await conn.send(FindCoordinatorRequest(key=key, key_type=key_type), version=version)
        code, node, host, port = response.error_code, response.node_id, response.host, response.port
        message = getattr(response, "error_message", None)
    if code != ErrorCode.NONE:
        raise KafkaError(
            f"FindCoordinator for {key!r}: {ErrorCode(code).name} {message or ''}".strip(), ErrorCode(code)
        )
    return CoordinatorAddress(node, host, port)
