"""One copier of the copier workload (Kafka's transactions system test): a read_committed consumer in
a group and a transactional producer copy input to output, ``RECORDS_PER_TXN`` records per
transaction with the consumed offsets sent to the transaction. Runs until killed.

    python -m tests.transactions.copier_worker BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

RECORDS_PER_TXN = 750


def rewind(consumer: Consumer) -> None:
    """After an abort, go back to the group's committed offsets (what the aborted batch started at)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, 30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([source])
    while True:
        batch = [m for m in consumer.consume(num_messages=RECORDS_PER_TXN, timeout=1.0) if not m.error()]
        if not batch:
            continue
        try:
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, msg.value(), key=msg.key(), partition=msg.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                print(f"copier {tid}: fatal {error}", file=sys.stderr, flush=True)
                return 3
            print(f"copier {tid}: aborting after {error}", file=sys.stderr, flush=True)
            try:
                producer.abort_transaction(60)
            except KafkaException as again:
                print(f"copier {tid}: abort failed {again}", file=sys.stderr, flush=True)
                return 4
            time.sleep(0.5)
            rewind(consumer)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
