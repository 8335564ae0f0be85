"""Broker sessions on the active controller (Kafka's ``BrokerHeartbeatManager``): in memory only.

A registered broker's session lives as long as it heartbeats within ``broker.session.timeout.ms``;
the controller fences a broker whose session expired. Sessions are not in the metadata log: a newly
active controller starts every registered broker with a fresh session (as if it had just
heartbeated), so a failover never fences brokers that were merely talking to the old controller.

Each session also remembers the broker's last reported metadata offset (to know when a broker in
controlled shutdown may stop: every active broker has replayed the records that moved its
leaderships) and the offset its controlled shutdown completes at.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Session:
    broker_id: int
    last_contact_ms: int
    fenced: bool
    metadata_offset: int = -1
    # the last offset of the records that began its controlled shutdown; -1 when not shutting down
    controlled_shutdown_offset: int = -1

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerSessions:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, Session] = {}

    def get(self, broker_id: int) -> Session | None:
        return self._sessions.get(broker_id)

    def register(self, broker_id: int, fenced: bool, now_ms: int) -> None:
        """Track ``broker_id`` (fresh contact now); keeps a known broker's reported offset."""
        session = self._sessions.get(broker_id)
        if session is None:
            self._sessions[broker_id] = Session(broker_id, now_ms, fenced)
        else:
            session.last_contact_ms = now_ms
            session.fenced = fenced
            if fenced:
                session.controlled_shutdown_offset = -1

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        session = self._sessions[broker_id]
        session.last_contact_ms = now_ms
        session.metadata_offset = metadata_offset
        session.fenced = fenced
        if fenced:
            # a fenced broker leaves controlled shutdown: its next heartbeat is told to stop now
            session.controlled_shutdown_offset = -1

    def fence(self, broker_id: int) -> None:
        session = self._sessions.get(broker_id)
        if session is not None:
            session.fenced = True
            session.controlled_shutdown_offset = -1

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self._sessions.get(broker_id)
        return (
            session is not None
            and not session.fenced
            and session.last_contact_ms + self.session_timeout_ms >= now_ms
        )

    def start_controlled_shutdown(self, broker_id: int, offset: int) -> None:
        session = self._sessions[broker_id]
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = offset

    def lowest_active_offset(self) -> int | None:
        """The lowest metadata offset reported by an unfenced broker not shutting down (None: none)."""
        offsets = [s.metadata_offset for s in self._sessions.values() if not s.fenced and not s.shutting_down]
        return min(offsets) if offsets else None

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired, the longest silent first."""
        stale = [
            s
            for s in self._sessions.values()
            if not s.fenced and s.last_contact_ms + self.session_timeout_ms < now_ms
        ]
        return [s.broker_id for s in sorted(stale, key=lambda s: (s.last_contact_ms, s.broker_id))]

    def next_expiry_ms(self) -> int | None:
        """When the next unfenced session would expire (None: no unfenced broker)."""
        times = [
            s.last_contact_ms + self.session_timeout_ms + 1 for s in self._sessions.values() if not s.fenced
        ]
        return min(times) if times else None
