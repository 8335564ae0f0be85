"""What an OffsetCommit error means to the consumer, as one pure function, and the errors users see.

Kafka's consumers (the classic ``ConsumerCoordinator`` and the KIP-848 ``CommitRequestManager``) sort
the codes an OffsetCommit answer can carry into a few outcomes, and so do we:

- the coordinator moved or is down (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, REQUEST_TIMED_OUT, and
  a connection lost on the way): forget it, find it again, send again;
- the coordinator is loading its state, or the broker does not know the partition yet
  (COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION): back off and send again;
- KIP-848's STALE_MEMBER_EPOCH: the coordinator bumped the member's epoch and its answer has not
  reached us; learn the epoch (one heartbeat) and send again;
- REBALANCE_IN_PROGRESS: the commit cannot be taken now; :class:`RebalanceInProgress`, the next poll
  rejoins and the generation is kept;
- the membership the commit named is gone (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
  FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND): :class:`CommitFailed`, the partitions may be another
  member's already;
- anything else (OFFSET_METADATA_TOO_LARGE, INVALID_COMMIT_OFFSET_SIZE, GROUP_AUTHORIZATION_FAILED,
  TOPIC_AUTHORIZATION_FAILED, codes no commit should get): raised to the user as the broker's error.

Retries last until the commit's deadline (``default.api.timeout.ms`` or the caller's timeout), then
:class:`ConsumerTimeout`. GROUP_ID_NOT_FOUND is what a coordinator answers from OffsetCommit v9 where
older versions answered ILLEGAL_GENERATION (a commit naming a generation of a group it does not have),
so it is handled as that; Kafka 4.0's consumers still report it as an unexpected error.
"""

from __future__ import annotations

import enum

from onceflow.protocol.errors import COORDINATOR_MOVED, ErrorCode, KafkaError


class CommitFailed(KafkaError):
    """The commit cannot succeed: the group rebalanced and these partitions may belong to another
    member now. Poll again (which rejoins) and reprocess from the committed offsets. ``code`` is the
    coordinator's answer."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


class RebalanceInProgress(CommitFailed):
    """The group is rebalancing (or this member is between generations): poll() to finish joining,
    then commit again. Kafka's RebalanceInProgressException."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


class ConsumerTimeout(KafkaError):
    """A blocking consumer call (commit, committed, position) could not finish within its timeout
    (``default.api.timeout.ms`` unless given): the coordinator or broker stayed unreachable. Kafka's
    TimeoutException; retriable."""

    code = ErrorCode.REQUEST_TIMED_OUT


class CommitErrorAction(enum.Enum):
    FIND_COORDINATOR = "FIND_COORDINATOR"  # forget the coordinator, find it again, send again
    RETRY = "RETRY"  # back off, send again
    REFRESH_EPOCH = "REFRESH_EPOCH"  # KIP-848: learn the member's epoch (a heartbeat), send again
    REJOIN = "REJOIN"  # RebalanceInProgress; the next poll rejoins (generation kept)
    FENCED = "FENCED"  # CommitFailed; the membership named in the commit is gone
    RAISE = "RAISE"  # the broker's error, to the user


_FIND_COORDINATOR = COORDINATOR_MOVED | {
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NETWORK_EXCEPTION,  # our transport's code for a connection lost mid-request
}
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
_FENCED = frozenset(
    {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.FENCED_MEMBER_EPOCH,
    }
)


def commit_error_action(code: ErrorCode) -> CommitErrorAction:
    """What the consumer does when an OffsetCommit (or the connection carrying it) fails with ``code``."""
    if code in _FIND_COORDINATOR:
        return CommitErrorAction.FIND_COORDINATOR
    if code in _RETRY:
        return CommitErrorAction.RETRY
    if code == ErrorCode.STALE_MEMBER_EPOCH:
        return CommitErrorAction.REFRESH_EPOCH
    if code == ErrorCode.REBALANCE_IN_PROGRESS:
        return CommitErrorAction.REJOIN
    if code in _FENCED:
        return CommitErrorAction.FENCED
    return CommitErrorAction.RAISE


def first_commit_error(response) -> tuple[str, int, ErrorCode] | None:
    """``(topic, partition, code)`` of the first partition an OffsetCommit answer refused, or None.
    A refusal for the group (coordinator moved, generation gone) comes back on every partition."""
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.NONE:
                return topic.name, p.partition_index, ErrorCode(p.error_code)
    return None
