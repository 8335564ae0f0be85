"""What the broker's Prometheus metrics cost on the produce path: one broker with ``--metrics-port``
(scraped every second while it works), one without, side by side.

    python bench/broker_metrics.py [--quick] [--records N] [--rounds R] [--scrape-interval S]

A confluent-kafka producer sends N records of 1,000 bytes to one partition (acks=all), in two shapes:
``large`` batches (batch.size=1 MiB, linger.ms=5: the produce benchmark's), where a request carries
a thousand records, and ``small`` ones (batch.size=16 KiB, linger.ms=0: Kafka's default batch size),
where the per-request work (timing each request, counting its answer's error codes) weighs most.
The two brokers run interleaved (off, on, on, off, ...) and the medians are reported: records per
second (target: on/off >= 0.97) and the broker process's CPU seconds per GB moved. While the
metrics broker works, a thread reads its ``/metrics`` every ``--scrape-interval`` seconds (Prometheus
scrapes every 15 to 60 s; 1 s is the pessimistic case), so the scrapes' own cost is in its numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BrokerProcess,
    delete_topic,
    emit,
    free_port,
    kill_all,
    measure,
    median,
    produce_to_partition_0,
    progress,
)
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

FULL = {"records": 200_000, "rounds": 5}
QUICK = {"records": 40_000, "rounds": 3}
RECORD_BYTES = 1_000
SHAPES = {
    "large": {"batch.size": 1 << 20, "linger.ms": 5},
    "small": {"batch.size": 16_384, "linger.ms": 0},
}
CONTENDERS = ("off", "on")


class Scraper:
    """Reads ``url`` every ``interval_s`` in a thread until stopped; keeps how long each read took."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url = url
        self.interval_s = interval_s
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            start = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=30) as response:
                response.read()
            self.seconds.append(time.perf_counter() - start)


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, records: int, payload: bytes, shape: dict) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": "none",
            "queue.buffering.max.kbytes": 1 << 20,
            **shape,
        }
    )
    produce_to_partition_0(producer, topic, records, payload, f"produce to {bootstrap}")


def run_once(name, broker, metrics_url, shape_name, records, payload, interval_s, samples, scrapes) -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    scraper = Scraper(metrics_url, interval_s) if metrics_url else None
    with measure(broker.pid) as m:
        if scraper is None:
            produce(broker.bootstrap, topic, records, payload, SHAPES[shape_name])
        else:
            with scraper:
                produce(broker.bootstrap, topic, records, payload, SHAPES[shape_name])
    r = m.result
    gigabytes = records * RECORD_BYTES / 1e9
    samples[shape_name][name]["rate"].append(records / r.seconds)
    samples[shape_name][name]["cpu"].append(r.broker_cpu_s / gigabytes)
    if scraper is not None:
        scrapes.extend(scraper.seconds)
    progress(
        f"  {shape_name:5s} metrics {name:3s} {records / r.seconds:>9,.0f} rec/s  broker "
        f"{r.broker_cpu_s / gigabytes:6.2f} cpu-s/GB  ({r.seconds:.2f} s"
        + (f", {len(scraper.seconds)} scrapes)" if scraper else ")")
    )
    delete_topic(broker.bootstrap, topic)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller run, under 60 s")
    parser.add_argument("--records", type=int, help="records per run")
    parser.add_argument("--rounds", type=int, help="rounds (each runs both brokers, both shapes)")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds between scrapes")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    records = args.records or preset["records"]
    rounds = args.rounds or preset["rounds"]
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]

    import tempfile

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-metrics-")
    metrics_port = free_port()
    brokers = {
        "off": BrokerProcess(Path(tmp.name) / "off"),
        "on": BrokerProcess(Path(tmp.name) / "on", extra_args=("--metrics-port", str(metrics_port))),
    }
    urls = {"off": None, "on": f"http://127.0.0.1:{metrics_port}/metrics"}
    samples = {shape: {name: {"rate": [], "cpu": []} for name in CONTENDERS} for shape in SHAPES}
    scrapes: list[float] = []
    try:
        for broker in brokers.values():
            broker.start()
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: {records:,} records of {RECORD_BYTES} bytes")
            order = CONTENDERS if round_no % 2 else tuple(reversed(CONTENDERS))  # off, on | on, off
            for shape in SHAPES:
                for name in order:
                    run_once(
                        name,
                        brokers[name],
                        urls[name],
                        shape,
                        records,
                        payload,
                        args.scrape_interval,
                        samples,
                        scrapes,
                    )
    finally:
        for broker in brokers.values():
            broker.stop()
        kill_all()
        tmp.cleanup()

    results, ratios, cpu = {}, {}, {}
    for shape in SHAPES:
        for name in CONTENDERS:
            results[f"{shape}.metrics_{name}"] = round(median(samples[shape][name]["rate"]))
            cpu[f"{shape}.metrics_{name}"] = round(median(samples[shape][name]["cpu"]), 2)
        ratios[f"{shape} on/off"] = round(results[f"{shape}.metrics_on"] / results[f"{shape}.metrics_off"], 3)
        ratios[f"{shape} cpu on/off"] = round(cpu[f"{shape}.metrics_on"] / cpu[f"{shape}.metrics_off"], 3)
    emit(
        {
            "bench": "broker_metrics",
            "unit": "records/s",
            "results": results,
            "ratios": ratios,
            "cpu_s_per_gb": cpu,
            "scrape_ms_median": round(median(scrapes) * 1000, 1) if scrapes else None,
            "params": {
                "records": records,
                "record_bytes": RECORD_BYTES,
                "rounds": rounds,
                "quick": args.quick,
                "acks": "all",
                "shapes": SHAPES,
                "scrape_interval_s": args.scrape_interval,
                "cpus": os.cpu_count(),
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
