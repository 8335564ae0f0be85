"""A consumer-group member in its own process, for the interop tests (so it can be kill -9'ed).

    python tests/group/interop_worker.py CLIENT BOOTSTRAP TOPIC GROUP [STRATEGY]

CLIENT is confluent, kafka-python or aiokafka. It consumes from the earliest offset, commits
synchronously after each processed batch, and prints JSON lines to stdout:
``{"assigned": [partitions]}`` about every 0.3 s and ``{"records": [[partition, offset], ...]}``
after each batch is committed. SIGTERM closes the consumer cleanly (it leaves the group).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

SESSION_MS = 6000
HEARTBEAT_MS = 500
REPORT_EVERY_S = 0.3

stopping = False


def _stop(*_args) -> None:
    global stopping
    stopping = True


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def run_confluent(bootstrap: str, topic: str, group: str, strategy: str) -> None:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "partition.assignment.strategy": strategy,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    c.subscribe([topic])
    last = 0.0
    while not stopping:
        msgs = c.consume(num_messages=200, timeout=0.2)
        done = [[m.partition(), m.offset()] for m in msgs if not m.error()]
        if done:
            try:
                c.commit(asynchronous=False)
                emit({"records": done})
            except Exception as exc:  # lost the partitions in a rebalance: not committed, not reported
                emit({"commit_failed": str(exc)})
        if time.monotonic() - last > REPORT_EVERY_S:
            emit({"assigned": sorted(tp.partition for tp in c.assignment())})
            last = time.monotonic()
    c.close()


def run_kafka_python(bootstrap: str, topic: str, group: str) -> None:
    from kafka import KafkaConsumer

    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        metadata_max_age_ms=1000,
    )
    last = 0.0
    while not stopping:
        batches = c.poll(timeout_ms=200)
        done = [[tp.partition, m.offset] for tp, ms in batches.items() for m in ms]
        if done:
            try:
                c.commit()
                emit({"records": done})
            except Exception as exc:
                emit({"commit_failed": str(exc)})
        if time.monotonic() - last > REPORT_EVERY_S:
            emit({"assigned": sorted(tp.partition for tp in c.assignment())})
            last = time.monotonic()
    c.close()


async def run_aiokafka(bootstrap: str, topic: str, group: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        metadata_max_age_ms=1000,
        # aiokafka offers only roundrobin by default; the other clients prefer range.
        partition_assignment_strategy=(RangePartitionAssignor, RoundRobinPartitionAssignor),
    )
    await c.start()
    last = 0.0
    try:
        while not stopping:
            batches = await c.getmany(timeout_ms=200)
            done = [[tp.partition, m.offset] for tp, ms in batches.items() for m in ms]
            if done:
                try:
                    await c.commit()
                    emit({"records": done})
                except Exception as exc:
                    emit({"commit_failed": str(exc)})
            if time.monotonic() - last > REPORT_EVERY_S:
                emit({"assigned": sorted(tp.partition for tp in c.assignment())})
                last = time.monotonic()
    finally:
        await c.stop()


def main() -> None:
    client, bootstrap, topic, group = sys.argv[1:5]
    strategy = sys.argv[5] if len(sys.argv) > 5 else "range,roundrobin"
    signal.signal(signal.SIGTERM, _stop)
    if client == "confluent":
        run_confluent(bootstrap, topic, group, strategy)
    elif client == "kafka-python":
        run_kafka_python(bootstrap, topic, group)
    elif client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, topic, group))
    else:
        raise SystemExit(f"unknown client {client}")
    emit({"closed": True})


if __name__ == "__main__":
    main()
