"""BrokerTopicMetrics: what the Produce and Fetch handlers count per topic, as Kafka's ``BrokerTopicStats``.

The handlers call :meth:`BrokerTopicStats.produced`, :meth:`~BrokerTopicStats.produce_failed` and
:meth:`~BrokerTopicStats.fetched`: a dictionary lookup and a few integer additions per partition. The
all-topics totals and the topics' names are worked out at scrape time: a fetch by topic id (Fetch
v13+) counts under the id, which the scrape folds into the topic's name, and the counts of a topic
that is gone move into the totals, which never go down.

As in Kafka (``ReplicaManager.appendToLocalLog`` and ``readFromLog``):

- every partition of a Produce counts a produce request, every partition a Fetch read counts a fetch
  request (the read that answered: a long poll's earlier, empty reads do not count);
- messages and bytes in count what was appended (a duplicate batch, answered with its first offsets,
  appends nothing); bytes out count the records of the partitions a Fetch answer carries;
- a partition whose produce or fetch failed counts as failed, except for the errors Kafka does not
  count there (a client's mistake or a leadership change, not a broker problem: :data:`NOT_FAILURES`).

Only clients' requests count: the coordinators' own appends to ``__consumer_offsets`` and
``__transaction_state`` do not go through the Produce handler (their counts are the coordinators').
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from onceflow.broker.metrics.families import Families, jmx
from onceflow.protocol.errors import ErrorCode

E = ErrorCode

# Errors after which Kafka does not mark FailedProduceRequestsPerSec / FailedFetchRequestsPerSec.
NOT_FAILURES_PRODUCE = frozenset(
    {
        E.NONE,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_LEADER_OR_FOLLOWER,
        E.MESSAGE_TOO_LARGE,
        E.RECORD_LIST_TOO_LARGE,
        E.CORRUPT_MESSAGE,
        E.KAFKA_STORAGE_ERROR,
        E.INVALID_TOPIC_EXCEPTION,  # an internal topic: refused before Kafka's try
    }
)
NOT_FAILURES_FETCH = frozenset(
    {
        E.NONE,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.UNKNOWN_TOPIC_ID,
        E.NOT_LEADER_OR_FOLLOWER,
        E.UNKNOWN_LEADER_EPOCH,
        E.FENCED_LEADER_EPOCH,
        E.REPLICA_NOT_AVAILABLE,
        E.KAFKA_STORAGE_ERROR,
        E.INCONSISTENT_TOPIC_ID,
        E.OFFSET_OUT_OF_RANGE,
    }
)
_UNKNOWN_TOPIC = frozenset({E.UNKNOWN_TOPIC_OR_PARTITION, E.UNKNOWN_TOPIC_ID})


class TopicCounters:
    """One topic's counts since the broker started (or the all-topics counts of topics now gone)."""

    __slots__ = (
        "messages_in",
        "bytes_in",
        "bytes_out",
        "produce_requests",
        "failed_produce_requests",
        "fetch_requests",
        "failed_fetch_requests",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def add(self, other: TopicCounters) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


# (field, MBean name, meaning) of each BrokerTopicMetrics meter exported.
METERS = (
    ("messages_in", "MessagesInPerSec", "Records appended by Produce requests."),
    ("bytes_in", "BytesInPerSec", "Bytes of record batches appended by Produce requests."),
    ("bytes_out", "BytesOutPerSec", "Bytes of records sent in Fetch answers."),
    ("produce_requests", "TotalProduceRequestsPerSec", "Partitions of Produce requests (one per partition)."),
    ("failed_produce_requests", "FailedProduceRequestsPerSec", "Partitions of Produce requests that failed."),
    ("fetch_requests", "TotalFetchRequestsPerSec", "Partitions read by Fetch requests (one per partition)."),
    ("failed_fetch_requests", "FailedFetchRequestsPerSec", "Partitions of Fetch requests that failed."),
)


class BrokerTopicStats:
    def __init__(self) -> None:
        self._topics: dict[str | uuid.UUID, TopicCounters] = {}
        self._gone = TopicCounters()  # topics deleted since: their share of the totals

    def _of(self, topic: str | uuid.UUID) -> TopicCounters:
        counters = self._topics.get(topic)
        if counters is None:
            counters = self._topics[topic] = TopicCounters()
        return counters

    # -- the hot path --------------------------------------------------------------------------------

    def produced(self, topic: str, size: int, result: Any) -> None:
        """A partition's batches of ``size`` bytes were appended (``result``: the log's AppendResult)."""
        counters = self._of(topic)
        counters.produce_requests += 1
        if not result.duplicate:
            counters.messages_in += result.last_offset - result.base_offset + 1
            counters.bytes_in += size

    def produce_failed(self, topic: str | None, code: int) -> None:
        """A partition's produce failed with ``code``; ``topic`` None: a topic this broker does not
        have (counted in the totals only: names a client made up take no memory)."""
        counters = self._of(topic) if topic is not None else self._gone
        counters.produce_requests += 1
        if code not in NOT_FAILURES_PRODUCE:
            counters.failed_produce_requests += 1

    def fetched(self, read: Iterable[tuple[Any, Any]], answered: Iterable[tuple[Any, Any]]) -> None:
        """``read``: ``((topic, partition), PartitionData)`` of every partition the answering read went
        over; ``answered``: those the answer carries (an incremental fetch leaves some out). ``topic``
        is a name, or an id for a fetch by topic id."""
        topics = self._topics
        for (topic, _), data in read:
            code = data.error_code
            # A name or id this broker does not have counts in the totals only.
            counters = self._gone if code in _UNKNOWN_TOPIC else (topics.get(topic) or self._of(topic))
            counters.fetch_requests += 1
            if code and code not in NOT_FAILURES_FETCH:
                counters.failed_fetch_requests += 1
        for (topic, _), data in answered:
            if data.records:
                (topics.get(topic) or self._of(topic)).bytes_out += len(data.records)

    # -- scrape time ---------------------------------------------------------------------------------

    def settle(self, names_by_id: dict[uuid.UUID, str], live: set[str]) -> None:
        """Fold counts kept under a topic id into its name, and those of topics that are gone into the
        totals (run on the event loop, between requests)."""
        for key in list(self._topics):
            counters = self._topics[key]
            name = names_by_id.get(key) if isinstance(key, uuid.UUID) else key
            if name is None or name not in live:
                self._gone.add(counters)
                del self._topics[key]
            elif name != key:
                self._of(name).add(counters)
                del self._topics[key]

    def collect(self, families: Families, topics: Any) -> None:
        """Per topic and in all (the sample without a ``topic`` label), for every meter."""
        names_by_id = {t.topic_id: t.name for t in topics}
        self.settle(names_by_id, set(names_by_id.values()))
        total = TopicCounters()
        total.add(self._gone)
        for counters in self._topics.values():
            total.add(counters)
        for field, mbean, meaning in METERS:
            name = jmx("server", "BrokerTopicMetrics", mbean)
            families.counter(name, meaning, getattr(total, field))
            for topic, counters in sorted(self._topics.items()):
                families.counter(name, meaning, getattr(counters, field), {"topic": str(topic)})
