"""Idempotence on the broker: what it costs on produce, and how fast a partition with many producers
restarts.

    python bench/idempotence.py [--quick] [--records N] [--rounds R]

1. Produce: a confluent-kafka producer sends N records of 1,000 bytes to one partition of one onceflow
   broker (acks=all, linger.ms=5, batch.size=1 MiB, no compression), with ``enable.idempotence`` true
   and false, interleaved (idem, plain, plain, idem, ...) after one discarded warm-up round of each, a
   fresh topic per run. Both use max.in.flight=5 (what idempotence imposes), so the difference is the
   producer-state work alone. Target: idempotent/plain >= 0.97. The same pair also runs against
   librdkafka's in-process mock cluster (``test.mock.num.brokers``): its ratio is what the client alone
   makes of idempotence, the reference for ours.
2. Restart: a partition with ~1 GB of log written by 100,000 producer ids (one 10-record batch each)
   in 100 MiB segments (segment.bytes=104857600; each roll leaves a producer snapshot). Timed from
   spawning ``onceflow serve`` to its listening line (Python start-up included):
   - clean: after SIGTERM (snapshot at the log end: nothing to replay);
   - unclean: after SIGKILL, with the snapshot at the log end removed (``close()`` wrote it; a crash
     would not have), so recovery CRC-scans the active segment and replays the batches after the newest
     periodic snapshot (taken every 64 MiB appended).
   Target: under 2 s. ``Log.open`` alone is timed too, in this process, for both cases.

Progress goes to stderr; the last stdout line is one JSON object (see /work/shared/BENCH.md).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import crc32c  # noqa: E402
from _common import (  # noqa: E402
    BrokerProcess,
    delete_topic,
    emit,
    kill_all,
    measure,
    median,
    produce_to_partition_0,
    progress,
)
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from onceflow.log.config import LogConfig  # noqa: E402
from onceflow.log.log import Log  # noqa: E402
from onceflow.log.producer_snapshot import delete_snapshot, list_snapshots  # noqa: E402
from onceflow.protocol.record_codec import encode_batch  # noqa: E402
from onceflow.protocol.records import validate_produce_records  # noqa: E402

FULL = {"records": 300_000, "rounds": 5, "producers": 100_000, "restart_rounds": 3}
QUICK = {"records": 60_000, "rounds": 3, "producers": 10_000, "restart_rounds": 3}
RECORD_BYTES = 1_000
RECORDS_PER_PRODUCER_BATCH = 10
SEGMENT_BYTES = 104_857_600
# Offsets in the magic-2 batch header (Kafka's DefaultRecordBatch).
_CRC_AT, _ATTRIBUTES_AT, _PRODUCER_ID_AT = 17, 21, 43


# -- 1. produce throughput ---------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=configs or {})
    admin.create_topics([new])[topic].result(timeout=30)


def new_producer(bootstrap: str | None, topic: str, idempotent: bool) -> Producer:
    """A connected producer: one record sent and acknowledged, so the timed part excludes start-up
    (connecting, metadata and, for the idempotent one, InitProducerId, which librdkafka takes its
    time over: ~0.4 s here)."""
    where = {"bootstrap.servers": bootstrap} if bootstrap else {"test.mock.num.brokers": 1}
    producer = Producer(
        {
            **where,
            "enable.idempotence": idempotent,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    producer.produce(topic, b"warm-up", partition=0)
    if producer.flush(30):
        raise RuntimeError(f"warm-up record to {bootstrap} was not acknowledged")
    return producer


def produce(producer: Producer, topic: str, records: int, payload: bytes) -> None:
    produce_to_partition_0(producer, topic, records, payload, "produce")


def produce_rounds(broker: BrokerProcess | None, records: int, rounds: int) -> dict:
    """ABBA rounds after a discarded warm-up; ``broker`` None = librdkafka's mock cluster."""
    payload = b"x" * RECORD_BYTES
    gigabytes = records * RECORD_BYTES / 1e9
    samples = {name: {"rate": [], "cpu": []} for name in ("idempotent", "plain")}
    for round_no in range(-1, rounds):  # round -1: warm-up, not counted
        # ABBA order: whichever goes first in a round gets no systematic advantage.
        for name in ("idempotent", "plain") if round_no % 2 == 0 else ("plain", "idempotent"):
            topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
            if broker is not None:
                create_topic(broker.bootstrap, topic)
                producer = new_producer(broker.bootstrap, topic, idempotent=name == "idempotent")
            else:
                producer = new_producer(None, topic, idempotent=name == "idempotent")
            started = time.perf_counter()
            with measure(broker.pid if broker is not None else os.getpid()) as m:
                produce(producer, topic, records, payload)
            seconds = time.perf_counter() - started
            del producer  # librdkafka's teardown happens here, outside the timed part
            if broker is not None:
                delete_topic(broker.bootstrap, topic)
            label = "warm-up" if round_no < 0 else f"round {round_no + 1}"
            cpu = m.result.broker_cpu_s if broker is not None else float("nan")
            progress(f"  {label:8s} {name:10s} {records / seconds:>10,.0f} rec/s  broker {cpu:5.2f} cpu-s")
            if round_no >= 0:
                samples[name]["rate"].append(records / seconds)
                samples[name]["cpu"].append(cpu / gigabytes)
    return samples


def spread(values: list[float]) -> list[int]:
    return [round(min(values)), round(max(values))]


# -- 2. restart with many producers ------------------------------------------------------------


def producer_batch_template() -> bytearray:
    values = [(None, b"y" * RECORD_BYTES)] * RECORDS_PER_PRODUCER_BATCH
    return bytearray(encode_batch(values, producer_id=0, producer_epoch=0, base_sequence=0))


def fill_partition(directory: Path, producers: int, config: LogConfig) -> int:
    """One batch per producer id 1..producers, written through ``Log.append`` (the produce path)."""
    template = producer_batch_template()
    log = Log.open(directory, config)
    for pid in range(1, producers + 1):
        batch = bytearray(template)
        struct.pack_into(">q", batch, _PRODUCER_ID_AT, pid)
        struct.pack_into(">I", batch, _CRC_AT, crc32c.crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
        log.append(validate_produce_records(batch))
    size = log.size_in_bytes
    log.close()
    return size


def drop_close_snapshot(directory: Path) -> None:
    """Leave only the snapshots a crash would: not the one ``close()`` wrote at the log end."""
    snapshots = list_snapshots(directory)
    if snapshots:
        delete_snapshot(snapshots[-1].path)


def timed_start(broker: BrokerProcess) -> float:
    started = time.perf_counter()
    broker.start()
    return time.perf_counter() - started


def timed_log_open(directory: Path, config: LogConfig, *, clean: bool) -> tuple[float, int]:
    """Open (and recover) the partition in this process; leaves it as ``clean`` says."""
    started = time.perf_counter()
    log = Log.open(directory, config)
    elapsed = time.perf_counter() - started
    count = len(log.producer_state.active_producers())
    if clean:
        log.close()
    else:
        log.abandon()
    return elapsed, count


def restart_rounds(data_dir: Path, producers: int, rounds: int) -> tuple[dict, dict]:
    broker = BrokerProcess(data_dir / "broker")
    broker.start()
    topic = "restart-bench"
    create_topic(broker.bootstrap, topic, {"segment.bytes": str(SEGMENT_BYTES)})
    broker.stop()
    directory = broker.data_dir / f"{topic}-0"
    config = LogConfig(segment_bytes=SEGMENT_BYTES)
    started = time.perf_counter()
    size = fill_partition(directory, producers, config)
    progress(
        f"  wrote {size / 1e9:.2f} GB from {producers:,} producers in {time.perf_counter() - started:.1f} s"
    )
    samples = {"clean": [], "unclean": [], "log_open_clean": [], "log_open_unclean": []}
    try:
        for round_no in range(rounds):
            seconds, count = timed_log_open(directory, config, clean=True)
            assert count == producers, f"clean reopen found {count} producers"
            samples["log_open_clean"].append(seconds)
            samples["clean"].append(timed_start(broker))
            broker.kill9()
            drop_close_snapshot(directory)
            seconds, count = timed_log_open(directory, config, clean=False)
            assert count == producers, f"unclean reopen found {count} producers"
            samples["log_open_unclean"].append(seconds)
            drop_close_snapshot(directory)
            samples["unclean"].append(timed_start(broker))
            broker.stop()  # clean: the next round starts from a clean shutdown
            progress(
                f"  round {round_no + 1}: broker restart clean {samples['clean'][-1]:.2f} s, "
                f"unclean {samples['unclean'][-1]:.2f} s; Log.open clean {samples['log_open_clean'][-1]:.3f} s, "
                f"unclean {samples['log_open_unclean'][-1]:.3f} s"
            )
    finally:
        broker.stop()
    return samples, {"log_bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller N, fewer producers (< 60 s)")
    parser.add_argument("--records", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    params = dict(QUICK if args.quick else FULL)
    if args.records:
        params["records"] = args.records
    if args.rounds:
        params["rounds"] = args.rounds
    import tempfile

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-idem-")
    try:
        broker = BrokerProcess(Path(tmp.name) / "produce")
        broker.start()
        progress(
            f"produce: onceflow on {broker.bootstrap}, {params['records']:,} x 1 KB, {params['rounds']} rounds"
        )
        try:
            produce_samples = produce_rounds(broker, params["records"], params["rounds"])
        finally:
            broker.stop()
        progress("produce: librdkafka mock cluster (the client's own idempotence ratio)")
        mock_samples = produce_rounds(None, params["records"], params["rounds"])
        progress(f"restart: {params['producers']:,} producers, {params['restart_rounds']} rounds")
        restart_samples, restart_info = restart_rounds(
            Path(tmp.name), params["producers"], params["restart_rounds"]
        )
    finally:
        kill_all()
        tmp.cleanup()
    idem = median(produce_samples["idempotent"]["rate"])
    plain = median(produce_samples["plain"]["rate"])
    mock_idem = median(mock_samples["idempotent"]["rate"])
    mock_plain = median(mock_samples["plain"]["rate"])
    emit(
        {
            "bench": "idempotence",
            "unit": "records/s; seconds",
            "results": {
                "produce.idempotent": round(idem),
                "produce.plain": round(plain),
                "produce.mock.idempotent": round(mock_idem),
                "produce.mock.plain": round(mock_plain),
                "restart_clean_s": round(median(restart_samples["clean"]), 3),
                "restart_unclean_s": round(median(restart_samples["unclean"]), 3),
                "log_open_clean_s": round(median(restart_samples["log_open_clean"]), 3),
                "log_open_unclean_s": round(median(restart_samples["log_open_unclean"]), 3),
            },
            "ratios": {
                "produce idempotent/plain": round(idem / plain, 3),
                "mock idempotent/plain": round(mock_idem / mock_plain, 3),
            },
            "spread": {
                "produce.idempotent": spread(produce_samples["idempotent"]["rate"]),
                "produce.plain": spread(produce_samples["plain"]["rate"]),
                "produce.mock.idempotent": spread(mock_samples["idempotent"]["rate"]),
                "produce.mock.plain": spread(mock_samples["plain"]["rate"]),
                "restart_clean_s": [
                    round(min(restart_samples["clean"]), 3),
                    round(max(restart_samples["clean"]), 3),
                ],
                "restart_unclean_s": [
                    round(min(restart_samples["unclean"]), 3),
                    round(max(restart_samples["unclean"]), 3),
                ],
            },
            "cpu_s_per_gb": {
                "onceflow.idempotent": round(median(produce_samples["idempotent"]["cpu"]), 2),
                "onceflow.plain": round(median(produce_samples["plain"]["cpu"]), 2),
            },
            "params": {
                "records": params["records"],
                "record_bytes": RECORD_BYTES,
                "rounds": params["rounds"],
                "restart_producers": params["producers"],
                "restart_log_bytes": restart_info["log_bytes"],
                "restart_segment_bytes": SEGMENT_BYTES,
                "restart_rounds": params["restart_rounds"],
                "quick": args.quick,
            },
        }
    )


if __name__ == "__main__":
    main()
