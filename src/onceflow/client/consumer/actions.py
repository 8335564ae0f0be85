"""What a group membership state machine tells its driver to do after an answer, for both group
protocols (:mod:`.classic.membership`, :mod:`.kip848.membership`)."""

from __future__ import annotations

import enum


class Action(enum.Enum):
    NONE = "NONE"  # carry on
    REJOIN = "REJOIN"  # join again at once (JoinGroup; a heartbeat at epoch 0)
    REDISCOVER = "REDISCOVER"  # the coordinator moved or is unknown: FindCoordinator, then rejoin
    RETRY = "RETRY"  # back off, then send the same kind of request again
    LOST = "LOST"  # our membership is gone: the partitions are lost (not revoked), then rejoin
    FATAL = "FATAL"  # raise to the user
