"""The client side of the network-partition test, run inside the lab's hub namespace (see ``netns``):
one JSON request per line on stdin, one JSON answer per line on stdout.

Operations: ``create_topic``, ``partition`` (leader and ISR from Metadata), ``produce_raw`` (one
idempotent batch to one broker, as a producer that still believes it leads), ``load_start`` /
``load_stop`` (an idempotent acks=all producer writing in the background; stop answers what was
acknowledged), ``read_all``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Producer  # noqa: E402
from tests.replication import cluster_ops  # noqa: E402

_load: dict = {}


def create_topic(bootstrap: str, topic: str) -> None:
    cluster_ops.create_topic(bootstrap, topic)


def partition(bootstrap: str, topic: str) -> dict:
    view = cluster_ops.partitions_of(bootstrap, topic)[0]
    return {"leader": view.leader, "isr": list(view.isr)}


def produce_raw(
    address: str, topic: str, values: list[str], acks: int, timeout_ms: int, id_from: str
) -> list:
    pid, epoch = cluster_ops.init_producer_id(id_from)
    batch = cluster_ops.idempotent_batch(pid, epoch, 0, [v.encode() for v in values])
    try:
        return list(cluster_ops.produce_raw(address, topic, 0, batch, acks=acks, timeout_ms=timeout_ms))
    except Exception as exc:  # noqa: BLE001 - a broker that cannot answer: not acknowledged either
        return [-1, repr(exc)]


def load_start(bootstrap: str, topic: str) -> None:
    acked: list[str] = []
    stop = threading.Event()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "request.timeout.ms": 5000,
            "message.timeout.ms": 120000,
        }
    )

    def run() -> None:
        i = 0
        while not stop.is_set():
            value = f"load-{i}"
            producer.produce(
                topic,
                value=value.encode(),
                partition=0,
                on_delivery=lambda e, m, v=value: e is None and acked.append(v),
            )
            producer.poll(0.02)
            i += 1
        producer.flush(150)

    thread = threading.Thread(target=run)
    thread.start()
    _load.update(stop=stop, thread=thread, acked=acked)


def load_stop() -> list[str]:
    _load["stop"].set()
    _load["thread"].join(200)
    return list(_load["acked"])


def read_all(bootstrap: str, topic: str) -> list[str]:
    return [v.decode() for _, v in cluster_ops.read_all(bootstrap, topic)[0]]


OPS = {
    "create_topic": create_topic,
    "partition": partition,
    "produce_raw": produce_raw,
    "load_start": load_start,
    "load_stop": load_stop,
    "read_all": read_all,
}


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            answer = {"result": OPS[op](**request)}
        except Exception:  # noqa: BLE001 - the test reads it
            answer = {"error": traceback.format_exc(limit=3)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        time.sleep(0)


if __name__ == "__main__":
    main()
