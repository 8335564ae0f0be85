"""One member of a classic group, as the coordinator sees it (Kafka's ``MemberMetadata``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from onceflow.broker.coordinator.scheduler import TimerHandle


@dataclasses.dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # The member's assignors with their subscription metadata, most preferred first.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # The pending JoinGroup / SyncGroup response, answered when the phase completes.
    join_callback: Callable[[Any], None] | None = None
    sync_callback: Callable[[Any], None] | None = None
    # Joined during the current rebalance and never completed one (Kafka's ``isNew``).
    is_new: bool = False
    # Whether this member sent SyncGroup in the current generation (for the sync timeout).
    synced: bool = False
    heartbeat_timer: TimerHandle | None = None
    heartbeat_deadline_ms: int = 0

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same assignors with the same metadata in the same order: a rejoin that changes nothing."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred assignor among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError(f"member {self.member_id} supports none of {sorted(candidates)}")
