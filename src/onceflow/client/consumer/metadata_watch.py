"""When a classic group must rebalance because its topics changed: Kafka's metadata snapshot rule (sans-IO).

With the classic protocol the broker never looks at topics, so a partition added to a subscribed topic
(CreatePartitions) reaches nobody unless a member notices. Kafka's ``ConsumerCoordinator`` gives that
job to the leader alone: when it computes the assignment it keeps the partition count of every topic the
group subscribes to (``assignmentSnapshot``); every metadata refresh after that (at least every
``metadata.max.age.ms``) is compared with it, and any difference asks for a rejoin ("cached metadata has
changed"), so the next assignment covers the new partitions. A topic the metadata no longer describes
(deleted, or answered with an error) counts as no partitions, so its deletion rebalances too. A member
that was not the leader of the last round forgets any snapshot and checks nothing: the leader will see
the change. :class:`MetadataWatch` is that rule; the driver feeds it and asks :meth:`~MetadataWatch.changed`.

Refreshes carry a version, handed out when their Metadata request goes out: an answer requested before
the metadata the snapshot was taken from is older than the snapshot and is ignored, so it cannot make
a freshly assigned group rebalance again (Kafka's ``updateVersion``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from onceflow.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from onceflow.client.async_client import ClusterMetadata


def partition_counts(metadata: ClusterMetadata, topics: Iterable[str]) -> dict[str, int]:
    """Partitions per topic of ``topics`` in ``metadata``; 0 for a topic it does not describe or
    answers with an error (as Kafka's client metadata holds no partitions for such a topic)."""
    counts = {}
    for topic in topics:
        info = metadata.topics.get(topic)
        counts[topic] = len(info.partitions) if info is not None and info.error == ErrorCode.NONE else 0
    return counts


class MetadataWatch:
    """The leader's snapshot of the subscribed topics' partition counts, and the latest metadata."""

    def __init__(self) -> None:
        self._versions = 0  # handed out, one per Metadata request
        self._current_version = 0
        self.current: dict[str, int] | None = None  # the newest counts seen
        self.assigned: dict[str, int] | None = (
            None  # the counts the leader assigned with (Kafka's assignmentSnapshot)
        )

    @property
    def topics(self) -> frozenset[str]:
        """The topics the leader keeps watching: every topic the group subscribed to when it assigned
        (other members' too), empty for a follower."""
        return frozenset(self.assigned or ())

    def next_version(self) -> int:
        """Call when sending a Metadata request; pass the answer's counts to :meth:`update` with it."""
        self._versions += 1
        return self._versions

    def update(self, version: int, counts: Mapping[str, int]) -> None:
        """Metadata came back: newer than what was seen, it is the current view; older, it is ignored."""
        if version > self._current_version:
            self._current_version = version
            self.current = dict(counts)

    def assignment_made(self, version: int, counts: Mapping[str, int]) -> None:
        """The leader assigned with these counts (from the Metadata request of ``version``)."""
        self.update(version, counts)
        self.assigned = dict(counts)

    def joined(self, is_leader: bool) -> None:
        """A round ended with an assignment: only the leader keeps watching."""
        if not is_leader:
            self.assigned = None

    def changed(self) -> bool:
        """Whether the current metadata differs from what the leader assigned with: a topic's partition
        count grew or shrank, or the topic is gone (0) or came back."""
        if self.assigned is None or self.current is None:
            return False
        return any(self.current.get(topic, 0) != count for topic, count in self.assigned.items())

    def describe(self) -> str:
        """The difference, for the log: ``topic: assigned -> now``."""
        now = self.current or {}
        return ", ".join(
            f"{t}: {n} -> {now.get(t, 0)}"
            for t, n in sorted((self.assigned or {}).items())
            if now.get(t, 0) != n
        )
