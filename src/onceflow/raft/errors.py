"""Typed errors of the quorum. The ones a caller can act on carry a Kafka error code; the others
mean a rule of the protocol was broken and the node must not go on as if nothing happened."""

from __future__ import annotations

from onceflow.protocol.errors import ErrorCode, KafkaError


class NotLeader(KafkaError):
    """``append`` (or a snapshot of the leader's) on a node that is not the leader of the epoch."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER

    def __init__(self, message: str, leader_id: int | None = None, epoch: int = 0) -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.epoch = epoch


class IllegalTransition(Exception):
    """A move between epoch states that the protocol forbids; names both states."""


class QuorumViolation(Exception):
    """What the node saw contradicts an invariant of the protocol (two leaders in one epoch, a
    truncation below the high watermark, a snapshot that disagrees with the log). Raised rather than
    tolerated: going on could lose or change committed data."""


class SnapshotError(Exception):
    """A snapshot cannot be made or read (an offset that is not committed, a damaged file)."""
