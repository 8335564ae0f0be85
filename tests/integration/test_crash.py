"""kill -9 the broker while a producer streams acks=all records; nothing acknowledged may be lost.

The producer runs without idempotence and without retries, so nothing is ever sent twice: every
record reaches the broker at most once. Then, after several crashes and restarts on the same
data dir, the partition must hold every acknowledged record exactly once, at the offset its ack
named, in send order, with contiguous offsets. Records whose ack was lost in a crash may or may
not be there (written before the crash, or not), but never twice and never out of order.

(Idempotent retries arrive with the idempotent producer; this test will grow then.)
"""

from __future__ import annotations

import logging
import random
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from tests.helpers.clients import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.onceflow_only]  # peers with memory storage forget on kill

log = logging.getLogger(__name__)

RECORDS = 100_000
KILLS = 5
SEED = 20240611
PADDING = b"." * 40
MAX_UNACKED = 5_000


def _value(seq: int) -> bytes:
    return b"%09d|" % seq + PADDING


def _seq(value: bytes) -> int:
    return int(value[:9])


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.send.max.retries": 0,  # never resend: a record reaches the broker at most once
            "linger.ms": 5,
            "batch.size": 64 * 1024,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "message.timeout.ms": 120_000,
        }
    )


def _read_partition(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """Every record of partition 0 as (offset, value), up to the high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-verifier",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=20, cached=False)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 120
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {msg.error()}")
                out.append((msg.offset(), msg.value()))
        assert low == 0, f"log start offset moved to {low}"
        assert (out[-1][0] + 1 if out else 0) == high, f"read up to {out[-1][0] if out else None}, hw {high}"
        return out
    finally:
        consumer.close()


def test_acknowledged_records_survive_kill9(broker, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    rng = random.Random(SEED)
    # Seeded kill points, spread out: one in each equal slice of 5%..85% of the records.
    slice_len = RECORDS * 80 // 100 // KILLS
    kill_points = [RECORDS * 5 // 100 + k * slice_len + rng.randrange(slice_len) for k in range(KILLS)]
    acked: dict[int, int] = {}  # seq -> offset
    failed: dict[int, str] = {}

    def on_delivery(err, msg):
        seq = _seq(msg.value())
        if err is None:
            acked[seq] = msg.offset()
        else:
            failed[seq] = str(err)

    kills: list[tuple[int, int]] = []  # (records acked, records submitted) at each kill
    producing = threading.Event()
    producing.set()

    def killer() -> None:
        """Kill as the stream passes each seeded point, after a random few ms: mid-stream, mid-request."""
        acked_at_restart = 0
        for point in kill_points:
            # Past the point (acked or failed) and acks flowing again since the last restart.
            while (len(acked) + len(failed) < point or len(acked) <= acked_at_restart) and producing.is_set():
                time.sleep(0.002)
            if not producing.is_set():
                return
            time.sleep(rng.uniform(0.0, 0.02))
            kills.append((len(acked), submitted))
            broker.kill9()
            broker.restart()
            acked_at_restart = len(acked)

    producer = _producer(broker.bootstrap)
    submitted = 0
    killer_thread = threading.Thread(target=killer, name="killer", daemon=True)
    killer_thread.start()
    try:
        for seq in range(RECORDS):
            while True:
                try:
                    producer.produce(unique_topic, _value(seq), partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            submitted = seq + 1
            producer.poll(0)
            while len(producer) > MAX_UNACKED:  # keep pace with the broker: a stream, not one backlog
                producer.poll(0.01)
        remaining = producer.flush(180)
    finally:
        producing.clear()
        killer_thread.join(60)

    log.info("kills at (acked, submitted): %s; %d acked, %d failed", kills, len(acked), len(failed))
    assert remaining == 0, f"{remaining} records never got a delivery report"
    assert len(kills) == KILLS, f"only {len(kills)} of {KILLS} kills happened; {len(acked)} acked"
    assert len(acked) + len(failed) == RECORDS
    assert len(acked) > RECORDS // 2, (
        f"only {len(acked)} acked; failures like {next(iter(failed.values()), None)}"
    )

    stored = _read_partition(broker.bootstrap, unique_topic)
    _check_log(stored, acked)

    # Recovery must be stable: one more crash with no traffic changes nothing.
    broker.kill9()
    broker.restart()
    assert _read_partition(broker.bootstrap, unique_topic) == stored


def _check_log(stored: list[tuple[int, bytes]], acked: dict[int, int]) -> None:
    offsets = [offset for offset, _ in stored]
    assert offsets == list(range(len(stored))), "offsets are not contiguous from 0"
    seqs = [_seq(value) for _, value in stored]
    for (offset, value), seq in zip(stored, seqs, strict=True):
        assert value == _value(seq), f"record at offset {offset} corrupted: {value[:60]!r}"
    duplicates = len(seqs) - len(set(seqs))
    assert duplicates == 0, f"{duplicates} records stored more than once"
    assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), "records out of send order"
    where = {seq: offset for offset, seq in zip(offsets, seqs, strict=True)}
    missing = sorted(set(acked) - set(where))
    assert not missing, f"{len(missing)} acknowledged records lost, first seqs {missing[:10]}"
    moved = [seq for seq, offset in acked.items() if where[seq] != offset]
    assert not moved, f"{len(moved)} acked records not at their acked offset, e.g. seq {moved[0]}"
