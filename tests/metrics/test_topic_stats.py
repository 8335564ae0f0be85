"""BrokerTopicMetrics' counters (``broker/metrics/topic_stats``): per topic and in all, with a fetch by
topic id folded into the topic's name, and the totals never going down when a topic goes."""

from __future__ import annotations

import types
import uuid

from onceflow.broker.metrics.families import Families
from onceflow.broker.metrics.topic_stats import BrokerTopicStats
from onceflow.protocol.errors import ErrorCode


def appended(n: int, duplicate: bool = False):
    return types.SimpleNamespace(base_offset=10, last_offset=10 + n - 1, duplicate=duplicate)


def data(records: bytes = b"", error_code: int = 0):
    return types.SimpleNamespace(records=records, error_code=error_code)


def topics(*named: tuple[str, uuid.UUID]):
    return [types.SimpleNamespace(name=name, topic_id=tid, partitions=[]) for name, tid in named]


def values(stats: BrokerTopicStats, live) -> dict:
    families = Families()
    stats.collect(families, live)
    return {(s.name, s.labels.get("topic")): s.value for f in families for s in f.samples}


def test_counts_per_topic_and_in_all():
    a, b = uuid.uuid4(), uuid.uuid4()
    stats = BrokerTopicStats()
    stats.produced("a", 300, appended(3))
    stats.produced("a", 100, appended(1, duplicate=True))  # answered with its first offsets: nothing new
    stats.produce_failed("a", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    stats.produce_failed("a", ErrorCode.NOT_LEADER_OR_FOLLOWER)  # not a broker failure in Kafka's count
    stats.produce_failed(None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # no such topic: totals only
    stats.fetched(
        [(("b", 0), data(b"12345")), ((b, 1), data(b"123"))],
        [(("b", 0), data(b"12345")), ((b, 1), data(b"123"))],
    )
    stats.fetched([((uuid.uuid4(), 0), data(error_code=ErrorCode.UNKNOWN_TOPIC_ID))], [])
    got = values(stats, topics(("a", a), ("b", b)))
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", "a")] == 3
    assert got[("kafka_server_brokertopicmetrics_bytesin_total", "a")] == 300
    assert got[("kafka_server_brokertopicmetrics_totalproducerequests_total", "a")] == 4
    assert got[("kafka_server_brokertopicmetrics_totalproducerequests_total", None)] == 5
    assert got[("kafka_server_brokertopicmetrics_failedproducerequests_total", "a")] == 1
    assert got[("kafka_server_brokertopicmetrics_bytesout_total", "b")] == 8  # by name and by id, one topic
    assert got[("kafka_server_brokertopicmetrics_totalfetchrequests_total", "b")] == 2
    assert got[("kafka_server_brokertopicmetrics_totalfetchrequests_total", None)] == 3
    assert {t for _, t in got} == {None, "a", "b"}  # nothing kept for names or ids that do not exist


def test_totals_keep_the_counts_of_a_deleted_topic():
    a = uuid.uuid4()
    stats = BrokerTopicStats()
    stats.produced("a", 50, appended(5))
    assert values(stats, topics(("a", a)))[("kafka_server_brokertopicmetrics_messagesin_total", None)] == 5
    stats.produced("a", 20, appended(2))
    got = values(stats, topics())  # "a" was deleted since
    assert got[("kafka_server_brokertopicmetrics_messagesin_total", None)] == 7
    assert ("kafka_server_brokertopicmetrics_messagesin_total", "a") not in got
