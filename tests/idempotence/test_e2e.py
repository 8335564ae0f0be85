"""End to end: librdkafka's idempotent producer against a broker that loses 5% of its ACKs after
appending and is killed with SIGKILL twice mid-stream. The partition must end up holding every record
exactly once, in send order.

A dropped response makes librdkafka time the request out, reconnect and resend the same batch with
the same sequence numbers: the broker must answer it from its 5-batch cache. A kill -9 loses the
process, not the page cache, so the restarted broker must rebuild that cache from its last producer
snapshot plus the log tail. librdkafka's client-side timeout for a ProduceRequest is
``socket.timeout.ms`` (default 60 s; ``request.timeout.ms`` is only the broker-side ack timeout), so
it is lowered to 1.5 s to keep the test near a minute; ``message.timeout.ms`` is long so that no record
is ever given up.
"""

from __future__ import annotations

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import WireClient

from .wire import create_topic, fetch_values

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.onceflow_only

RECORDS = 100_000
KILL_AT = (30_000, 65_000)  # records acknowledged when the broker is killed


def test_idempotent_producer_survives_lost_acks_and_two_kill9(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=["--fault", "drop-response-after-append=0.05"])
    broker.start()
    try:
        topic = topic_name("e2e")
        with WireClient(broker.bootstrap) as client:
            create_topic(client, topic)
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "batch.num.messages": 500,
                "socket.timeout.ms": 1500,
                "message.timeout.ms": 300000,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 500,
            }
        )
        errors: list[str] = []
        acked = [0]
        kill_points = list(KILL_AT)

        def on_delivery(err, _msg) -> None:
            if err is not None:
                errors.append(str(err))
                return
            acked[0] += 1

        def kill_when_due() -> None:
            if kill_points and acked[0] >= kill_points[0]:
                kill_points.pop(0)
                broker.kill9()
                broker.restart()

        for i in range(RECORDS):
            while True:
                try:
                    producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            kill_when_due()
        while len(producer) > 0:
            producer.poll(0.05)
            kill_when_due()
        assert errors == []
        assert acked[0] == RECORDS
        assert kill_points == [], "the broker was not killed twice"
        with WireClient(broker.bootstrap) as client:
            records = fetch_values(client, topic)
        assert [offset for offset, _ in records] == list(range(RECORDS))
        assert [value for _, value in records] == [b"%d" % i for i in range(RECORDS)]
        log_text = broker.log_text()
        assert log_text.count("fault drop-response-after-append fired") > 0
        # the partition's log was recovered after each kill -9 (its creation is not a recovery)
        assert log_text.count(f"1 recovered after an unclean shutdown: {topic}-0\n") == 2
    finally:
        broker.stop()
