"""One copier of the copier workload (Kafka's transactions system test): a read_committed consumer in
a group and a transactional producer copy input to output, ``RECORDS_PER_TXN`` records per
transaction with the consumed offsets sent to the transaction. Runs until killed; exits (and the
test restarts it, as Kafka's system test restarts a fenced copier) on a fatal error or a stall.

    python -m tests.transactions.copier_worker BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Two librdkafka defects (2.16) made copiers stall after a broker restart, both on the client side:
when every broker is down, librdkafka re-bootstraps (KIP-1102) and decommissions the broker handles,
but its coordinator cache keeps the decommissioned handle as the group coordinator, so
``send_offsets_to_transaction`` waits forever for it after AddOffsetsToTxn succeeded, never sending
TxnOffsetCommit (confluentinc/librdkafka#5511), and that call ignores its timeout (#5456). So the
producer runs with ``metadata.recovery.strategy=none`` (the handle is kept and simply reconnects),
and a watchdog ends a copier whose transaction step is stuck anyway. Set ``COPIER_DEBUG`` (e.g.
``eos,protocol,broker,cgrp``) for librdkafka debug logs.

With ``COPIER_CLIENT=onceflow`` the copier is built from our own blocking ``Consumer`` and ``Producer``
instead (same loop, same watchdog), so the workload also checks our client's exactly-once path.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

RECORDS_PER_TXN = 750
API_TIMEOUT_S = 30
STALL_EXIT_S = 45  # longer than any API timeout: only a step that ignores its timeout trips it
STALLED_EXIT_CODE = 5


class Watchdog(threading.Thread):
    """Ends the process when one armed step (a transaction, an abort) takes longer than ``limit_s``."""

    def __init__(self, tid: str, limit_s: float) -> None:
        super().__init__(daemon=True)
        self.tid, self.limit_s = tid, limit_s
        self._deadline: float | None = None
        self._what = ""

    def arm(self, what: str) -> None:
        self._what = what
        self._deadline = time.monotonic() + self.limit_s

    def disarm(self) -> None:
        self._deadline = None

    def run(self) -> None:
        while True:
            time.sleep(1.0)
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                print(
                    f"copier {self.tid}: {self._what} stalled for {self.limit_s:.0f} s; exiting", flush=True
                )
                os._exit(STALLED_EXIT_CODE)


def rewind(consumer: Consumer) -> None:
    """After an abort, go back to the group's committed offsets (what the aborted batch started at)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    for tp in consumer.committed(assignment, API_TIMEOUT_S):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    debug = {"debug": os.environ["COPIER_DEBUG"]} if os.environ.get("COPIER_DEBUG") else {}
    if os.environ.get("COPIER_GROUP_PROTOCOL", "classic") == "consumer":
        group_protocol = {"group.protocol": "consumer"}  # KIP-848: the broker sets the timings
    else:
        group_protocol = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
    consumer = Consumer(
        {
            **debug,
            **group_protocol,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            **debug,
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "linger.ms": 5,
            "metadata.recovery.strategy": "none",  # see the module docstring (librdkafka#5511)
        }
    )
    watchdog = Watchdog(tid, STALL_EXIT_S)
    watchdog.start()
    watchdog.arm("init_transactions")
    producer.init_transactions(API_TIMEOUT_S)
    watchdog.disarm()
    consumer.subscribe([source])
    while True:
        batch = [m for m in consumer.consume(num_messages=RECORDS_PER_TXN, timeout=1.0) if not m.error()]
        if not batch:
            continue
        watchdog.arm("a transaction")
        try:
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, msg.value(), key=msg.key(), partition=msg.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), API_TIMEOUT_S)
            producer.commit_transaction(API_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                print(f"copier {tid}: fatal {error}", file=sys.stderr, flush=True)
                return 3
            print(f"copier {tid}: aborting after {error}", file=sys.stderr, flush=True)
            watchdog.arm("abort_transaction")
            try:
                producer.abort_transaction(API_TIMEOUT_S)
            except KafkaException as again:
                print(f"copier {tid}: abort failed {again}", file=sys.stderr, flush=True)
                return 4
            time.sleep(0.5)
            rewind(consumer)
        finally:
            watchdog.disarm()


def main_onceflow(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    """The same copier with our client: Consumer (read_committed, in the group) and Producer."""
    from onceflow.client import Consumer as OurConsumer
    from onceflow.client import Producer as OurProducer
    from onceflow.client.producer import FatalProducerError
    from onceflow.protocol.errors import KafkaError

    protocol = os.environ.get("COPIER_GROUP_PROTOCOL", "classic")
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        settings.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    consumer = OurConsumer(source, config=settings)
    producer = OurProducer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    watchdog = Watchdog(tid, STALL_EXIT_S)
    watchdog.start()
    watchdog.arm("init_transactions")
    producer.init_transactions()
    watchdog.disarm()
    while True:
        records = consumer.poll(timeout_ms=1000, max_records=RECORDS_PER_TXN)
        if not records:
            continue
        watchdog.arm("a transaction")
        try:
            producer.begin_transaction()
            offsets: dict[tuple[str, int], int] = {}
            for r in records:
                producer.send(sink, r.value, key=r.key, partition=r.partition)
                offsets[(r.topic, r.partition)] = r.offset + 1
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        except FatalProducerError as exc:
            print(f"copier {tid}: fatal {exc!r}", file=sys.stderr, flush=True)
            return 3
        except KafkaError as exc:
            print(f"copier {tid}: aborting after {exc!r}", file=sys.stderr, flush=True)
            watchdog.arm("abort_transaction")
            try:
                producer.abort_transaction()
            except KafkaError as again:
                print(f"copier {tid}: abort failed {again!r}", file=sys.stderr, flush=True)
                return 4
            time.sleep(0.5)
            assigned = list(consumer.assignment())  # back to the committed offsets
            for tp, committed in consumer.committed(assigned).items():
                consumer.seek(tp, committed.offset if committed is not None else 0)
        finally:
            watchdog.disarm()


if __name__ == "__main__":
    run = main_onceflow if os.environ.get("COPIER_CLIENT") == "onceflow" else main
    sys.exit(run(*sys.argv[1:6]))
