"""Round trip of one Produce request through onceflow: a 1 MB batch and a one-record batch.

    python bench/produce_latency.py [--quick] [--requests N]

One blocking socket sends a pre-encoded Produce request (v9, acks=all, 1,000 records of 1,000 bytes
in one batch) and waits for its answer, then the same with a one-record batch, N times. Reported:
median and p90 round trip of each, and the broker process's CPU and minor page faults per pair (from
/proc). The client does nothing but send and receive, so the round trip is the broker's produce
path plus loopback TCP: the latency a transactional producer pays when commit_transaction() flushes
its last batch (issue 4) and the per-request overhead every small request (EndTxn,
AddPartitionsToTxn) pays. Page faults should stay near zero: fresh pages for every 1 MB request were
once the largest single cost (see broker.malloc_tuning).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BrokerProcess, cpu_seconds, emit, kill_all, progress  # noqa: E402
from kafka.protocol.admin import CreateTopicsRequest  # noqa: E402
from kafka.protocol.producer import ProduceRequest  # noqa: E402
from tests.helpers.wire import WireClient, build_batch, encode_request  # noqa: E402

FULL = {"requests": 1000}
QUICK = {"requests": 300}
WARMUP = 20
PRODUCE_VERSION = 9
TOPIC = "latency"


def minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rindex(")") + 2 :].split()[7])  # field 10 of proc(5): minflt


def produce_frames(records: bytes, count: int, first_correlation_id: int) -> list[bytes]:
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[data(name=TOPIC, partition_data=[data.PartitionProduceData(index=0, records=records)])],
    )
    return [encode_request(request, PRODUCE_VERSION, first_correlation_id + i) for i in range(count)]


def round_trip(client: WireClient, frame: bytes) -> float:
    started = time.perf_counter()
    client.send_raw(frame)
    client.recv_frame()
    return time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * fraction), len(ordered) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests, a few seconds")
    parser.add_argument("--requests", type=int, help="timed request pairs")
    args = parser.parse_args(argv)
    count = args.requests or (QUICK if args.quick else FULL)["requests"]
    big_batch = build_batch([(b"%d" % i, b"x" * 1000) for i in range(1000)])
    small_batch = build_batch([(b"k", b"v")])
    big = produce_frames(big_batch, count + WARMUP, 1)
    small = produce_frames(small_batch, count + WARMUP, 1 + count + WARMUP)
    with tempfile.TemporaryDirectory(prefix="onceflow-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "onceflow")
        broker.start()
        progress(f"onceflow on {broker.bootstrap} (pid {broker.pid}); {count} request pairs")
        try:
            with WireClient(broker.bootstrap) as client:
                topic = CreateTopicsRequest.CreatableTopic(
                    name=TOPIC, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                )
                client.request(CreateTopicsRequest(topics=[topic], timeout_ms=10000, validate_only=False), 5)
                for i in range(WARMUP):
                    round_trip(client, big[i])
                    round_trip(client, small[i])
                cpu0, faults0 = cpu_seconds(broker.pid), minor_faults(broker.pid)
                big_s, small_s = [], []
                for i in range(WARMUP, WARMUP + count):
                    big_s.append(round_trip(client, big[i]))
                    small_s.append(round_trip(client, small[i]))
                cpu1, faults1 = cpu_seconds(broker.pid), minor_faults(broker.pid)
        finally:
            broker.stop()
            kill_all()
    emit(
        {
            "bench": "produce_latency",
            "unit": "ms",
            "results": {
                "produce_1mb_median": round(statistics.median(big_s) * 1e3, 3),
                "produce_1mb_p90": round(percentile(big_s, 0.9) * 1e3, 3),
                "produce_small_median": round(statistics.median(small_s) * 1e3, 3),
                "produce_small_p90": round(percentile(small_s, 0.9) * 1e3, 3),
            },
            "broker_per_pair": {
                "cpu_ms": round((cpu1 - cpu0) * 1e3 / count, 3),
                "minor_page_faults": round((faults1 - faults0) / count, 2),
            },
            "params": {
                "requests": count,
                "batch_bytes": len(big_batch),
                "produce_version": PRODUCE_VERSION,
                "acks": "all",
                "load_average_1m": os.getloadavg()[0],
                "cpus": os.cpu_count(),
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
