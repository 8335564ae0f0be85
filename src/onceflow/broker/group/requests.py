"""The values JoinGroup and SyncGroup exchange with the coordinator, free of wire classes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from onceflow.broker.coordinator.scheduler import TimerHandle
from onceflow.broker.group.log_format import GroupValue
from onceflow.broker.group.metadata import GroupMetadata
from onceflow.protocol.errors import ErrorCode, KafkaError


@dataclasses.dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    # JoinGroup v4+ (KIP-394): a first join without a member id gets one back with MEMBER_ID_REQUIRED.
    require_known_member_id: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # Only the leader gets the members: (member id, group instance id, metadata of the chosen protocol).
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]
# Write a group's record in the running operation; then ``on_written`` (the record is in the log) or
# ``on_failed`` (the append failed, with the error the members get).
StoreGroup = Callable[
    [GroupMetadata, GroupValue, Callable[[], None] | None, Callable[[KafkaError], None] | None], None
]
# Run ``callback`` as an operation of the group's partition after ``delay_ms``.
CallLater = Callable[[GroupMetadata, int, Callable[[], None]], TimerHandle]
