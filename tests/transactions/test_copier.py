"""The copier workload (Kafka's transactions system test), sized for CI.

Seed ``RECORDS`` records idempotently into a 3-partition input topic; 3 copier processes (read_committed
consumer in one group + transactional producer, 750 records per transaction, offsets sent to the
transaction) copy them to an output topic while the test kill -9s copiers and restarts the broker at
random. A concurrent read_committed consumer must never see a record twice (an aborted copy or a
duplicate commit), and the final read_committed read of the output must equal the input exactly.

Full size (100,000 records), with faults for its first 20 s (see ``CHAOS_S``).

A copier that dies (fatal error, fenced by a newer epoch, or its stall watchdog) is restarted by the
loop below, as Kafka's system test restarts copiers, so the run ends only when the monitor has seen
every input record (or the deadline passes and the assertions say what is missing).

This used to fail about one run in three: after a broker restart a librdkafka copier sat in
send_offsets_to_transaction forever (AddOffsetsToTxn answered, TxnOffsetCommit never sent). The
broker was not at fault: librdkafka 2.16 re-bootstraps when every broker is down, decommissions its
broker handles, and keeps the dead handle as the cached group coordinator (confluentinc/librdkafka
#5511; the call also ignores its timeout, #5456). See ``copier_worker`` for the workaround.
The internal topics are compacted during the run (small segments, a fast cleaner): the exactly-once
result must hold with the coordinators' logs rewritten under them.
Set ``COPIER_DEBUG=eos,protocol,broker,cgrp`` for librdkafka debug logs in the copier logs and a
verbose broker log.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from tests.helpers.broker import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

RECORDS = 100_000
COPIERS = 3
# Kill -9s and restarts for 20 s (about five: a broker restart, a copier kill, then more of both);
# 40 s added rounds of the same two faults and 20-30 s to each librdkafka run.
CHAOS_S = 20
REPO = Path(__file__).resolve().parents[2]


def _seed(bootstrap: str, topic: str) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, b"%06d" % i, key=b"%d" % i, partition=i % 3)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


class Monitor(threading.Thread):
    """A read_committed consumer of the output for the whole run, surviving broker restarts."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.values: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = ck.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"monitor-{uuid.uuid4().hex[:6]}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([self.topic])
        while not self.stop.is_set():
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if not msg.error():
                    self.values.append(msg.value())
        consumer.close()


def _start_copier(bootstrap, source, sink, group, index, log_dir, protocol="classic", client="librdkafka"):
    log = open(log_dir / f"copier-{index}.log", "ab")  # noqa: SIM115 - the child keeps it open
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.transactions.copier_worker",
            bootstrap,
            source,
            sink,
            group,
            f"copier-{index}",
        ],
        cwd=REPO,
        env={**os.environ, "COPIER_GROUP_PROTOCOL": protocol, "COPIER_CLIENT": client},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _kill9(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# The consumer group protocol (KIP-848) with the timings the classic copiers use (6 s session, 1 s
# heartbeats); its fencing in transactions is the member epoch instead of the generation.
CONSUMER_PROTOCOL_BROKER_ARGS = (
    "--config",
    "group.consumer.session.timeout.ms=6000",
    "--config",
    "group.consumer.heartbeat.interval.ms=1000",
)


# The internal topics roll 8 KiB segments and the log cleaner passes every 200 ms, so committed offsets,
# group records, markers and transaction states are compacted all through the kill -9s and restarts.
COMPACTION_BROKER_ARGS = (
    "--config",
    "offsets.topic.segment.bytes=8192",
    "--config",
    "transaction.state.log.segment.bytes=8192",
    "--config",
    "log.cleaner.backoff.ms=200",
)


@pytest.mark.onceflow_only
@pytest.mark.parametrize(
    "protocol,client", [("classic", "librdkafka"), ("consumer", "librdkafka"), ("consumer", "onceflow")]
)
def test_copier_workload_with_kill9_and_broker_restarts(tmp_path, protocol, client):
    rng = random.Random(4)
    verbose = ("--verbose",) if os.environ.get("COPIER_DEBUG") else ()
    group_args = CONSUMER_PROTOCOL_BROKER_ARGS if protocol == "consumer" else ()
    broker = BrokerProcess(tmp_path / "data", extra_args=verbose + group_args + COMPACTION_BROKER_ARGS)
    broker.start()
    copiers: list[subprocess.Popen] = []
    monitor = None
    try:
        b = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        for future in admin.create_topics([NewTopic("input", 3, 1), NewTopic("output", 3, 1)]).values():
            future.result(30)
        _seed(b, "input")
        monitor = Monitor(b, "output")
        monitor.start()
        copiers = [
            _start_copier(b, "input", "output", "copiers", i, tmp_path, protocol, client)
            for i in range(COPIERS)
        ]
        deadline = time.monotonic() + 240
        # Faults for CHAOS_S, and until there was at least one of each kind (a broker restart that
        # is slow on a busy machine must not leave the run without a copier kill).
        chaos_until = time.monotonic() + CHAOS_S
        broker_restarts = copier_kills = copier_exits = 0
        while time.monotonic() < deadline and len(set(monitor.values)) < RECORDS:
            time.sleep(rng.uniform(2.0, 5.0))
            for i, proc in enumerate(copiers):  # a copier that died of a fatal error comes back
                if proc.poll() is not None:
                    copiers[i] = _start_copier(b, "input", "output", "copiers", i, tmp_path, protocol, client)
                    copier_exits += 1
            if time.monotonic() > chaos_until and broker_restarts and copier_kills:
                continue
            if broker_restarts == 0 or rng.random() < 0.3:  # at least one broker restart per run
                broker.kill9()
                broker.restart()
                broker_restarts += 1
            else:
                i = rng.randrange(COPIERS)
                _kill9(copiers[i])
                copiers[i] = _start_copier(b, "input", "output", "copiers", i, tmp_path, protocol, client)
                copier_kills += 1
        time.sleep(3)
        print(
            f"copier workload: {copier_kills} copier kill -9s, {broker_restarts} broker restarts, "
            f"{copier_exits} copiers restarted after exiting"
        )
        assert broker_restarts > 0 and copier_kills > 0
        monitor.stop.set()
        monitor.join(30)
        seen = monitor.values
        duplicates = len(seen) - len(set(seen))
        assert duplicates == 0, f"the read_committed monitor saw {duplicates} records twice"
        final = _read_all(b, "output")
        assert len(final) == RECORDS, f"output has {len(final)} records, input {RECORDS}"
        assert sorted(final) == [b"%06d" % i for i in range(RECORDS)]
        broker_log = broker.log_path.read_text(errors="replace")
        assert "cleaned __consumer_offsets-" in broker_log and "cleaned __transaction_state-" in broker_log
    finally:
        for proc in copiers:
            _kill9(proc)
        if monitor is not None:
            monitor.stop.set()
        broker.stop()


def _read_all(bootstrap: str, topic: str) -> list[bytes]:
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"final-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 5:
        batch = [m for m in consumer.consume(num_messages=5000, timeout=0.5) if not m.error()]
        if batch:
            values += [m.value() for m in batch]
            idle_since = time.monotonic()
    consumer.close()
    return values
