"""What security costs: produce and consume 1 KB records over SASL_SSL (SCRAM-SHA-512) against
PLAINTEXT, with the same client in the same run, plus the time to open an authenticated connection.

    python bench/security.py [--quick] [--records N] [--rounds R]

One broker with two listeners and Kafka's StandardAuthorizer: PLAINTEXT, where the anonymous user has
the ACLs, and SASL_SSL, where the SCRAM user has the same ACLs, so both pay the same authorization and
the difference is TLS and SASL. A third contender is a broker without any security settings (no
authorizer): the plaintext path as it was. A confluent-kafka producer sends N records to one partition
(acks=all, linger.ms=5, batch.size=1 MiB), a confluent-kafka consumer reads them back; contenders run
interleaved, medians reported, with the broker's and the client's CPU seconds per GB.

The bound (issue 25's "an experiment bounds it"): a broker that stores nothing (bench/null_broker.py:
onceflow's connection code and TLS transport answering ApiVersions, Metadata and Produce from nothing)
on a PLAINTEXT and an SSL listener, produced to with the same producer in the same rounds. Its SSL /
PLAINTEXT ratio is what TLS leaves of the rate when the broker does nothing else; SASL adds nothing
per record once authenticated (SCRAM and PLAIN do not wrap the stream), so it bounds SASL_SSL too.

Connection set-up: onceflow's client opening a connection (TCP, TLS, ApiVersions, SaslHandshake and the
SCRAM exchange with Kafka's default 4096 iterations), median of many, against a plaintext connection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    BrokerProcess,
    emit,
    free_port,
    kill_all,
    measure,
    median,
    produce_to_partition_0,
    progress,
)
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from null_broker import NullBrokerProcess  # noqa: E402
from tests.helpers.secure_broker import SecureBroker  # noqa: E402

FULL = {"records": 300_000, "rounds": 3, "connections": 40}
QUICK = {"records": 40_000, "rounds": 3, "connections": 10}
RECORD_BYTES = 1_000
PHASES = ("produce", "consume")
CONTENDERS = ("plaintext", "sasl_ssl", "plaintext_no_authorizer", "null_plaintext", "null_ssl")
# The null broker serves produce only (it keeps nothing to consume).
NULL_CONTENDERS = ("null_plaintext", "null_ssl")


def grant(broker: SecureBroker) -> None:
    """ALL on bench-* topics and groups for the SCRAM user and for anonymous plaintext clients."""
    from onceflow.client import AdminClient as OnceflowAdmin
    from onceflow.client.admin_security import AclBinding
    from onceflow.protocol.acl_types import AclOperation, PatternType, PermissionType, ResourceType

    acls = [
        AclBinding(rtype, "bench-", PatternType.PREFIXED, who, "*", AclOperation.ALL, PermissionType.ALLOW)
        for who in ("User:alice", "User:ANONYMOUS")
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP)
    ]
    with OnceflowAdmin(broker.bootstrap, security=broker.scram()) as admin:
        admin.create_acls(acls)


def settings(broker, contender: str) -> dict:
    if contender == "null_plaintext":
        return {"bootstrap.servers": f"127.0.0.1:{broker.plain_port}"}
    if contender == "null_ssl":
        return {
            "bootstrap.servers": f"127.0.0.1:{broker.ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(broker.ca),
        }
    if contender == "sasl_ssl":
        return broker.scram("alice")
    if contender == "plaintext":
        return {"bootstrap.servers": f"127.0.0.1:{broker.plain_port}"}
    return {"bootstrap.servers": broker.bootstrap}


def produce(conf: dict, topic: str, records: int, payload: bytes) -> None:
    producer = Producer(
        {
            **conf,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    produce_to_partition_0(producer, topic, records, payload, f"produce to {conf['bootstrap.servers']}")


def consume(conf: dict, topic: str, records: int) -> None:
    consumer = Consumer(
        {
            **conf,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = empty = 0
        while seen < records:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            if not batch:
                empty += 1
                if empty > 30:
                    raise RuntimeError(f"consume: stuck at {seen} of {records}")
                continue
            for msg in batch:
                if msg.error():
                    raise RuntimeError(f"consume: {msg.error()}")
            seen += len(batch)
    finally:
        consumer.close()


def run_round(
    name: str, broker, conf: dict, admin_conf: dict, records: int, payload: bytes, samples: dict
) -> None:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = None
    if admin_conf is not None:
        admin = AdminClient(admin_conf)  # kept referenced until the result: librdkafka handles die with it
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    gigabytes = records * RECORD_BYTES / 1e9
    for phase in ("produce",) if name in NULL_CONTENDERS else PHASES:
        with measure(broker.pid) as m:
            if phase == "produce":
                produce(conf, topic, records, payload)
            else:
                consume(conf, topic, records)
        r = m.result
        samples[name][phase]["rate"].append(records / r.seconds)
        samples[name][phase]["broker_cpu_s_per_gb"].append(r.broker_cpu_s / gigabytes)
        samples[name][phase]["client_cpu_s_per_gb"].append(r.client_cpu_s / gigabytes)
        progress(
            f"  {name:24s} {phase:7s} {records / r.seconds:>10,.0f} rec/s  "
            f"broker {r.broker_cpu_s:6.2f} cpu-s  client {r.client_cpu_s:6.2f} cpu-s  ({r.seconds:.2f} s)"
        )
    if admin is not None:
        admin.delete_topics([topic])[topic].result(30)  # recycled pages for the next phase (see _common)


def connection_setup_ms(broker: SecureBroker, count: int) -> dict[str, float]:
    """Median milliseconds to open an authenticated connection with onceflow's client."""
    from onceflow.client.connection import Connection
    from onceflow.client.security import ClientSecurity

    cases = {
        "plaintext": (broker.plain_port, None),
        "sasl_plaintext_scram_sha_512": (
            broker.sasl_port,
            ClientSecurity.from_config(broker.sasl_plaintext("alice")),
        ),
        "sasl_ssl_scram_sha_512": (broker.sasl_ssl_port, ClientSecurity.from_config(broker.scram("alice"))),
        "sasl_ssl_scram_sha_256": (
            broker.sasl_ssl_port,
            ClientSecurity.from_config(broker.scram("alice", "SCRAM-SHA-256")),
        ),
        "sasl_ssl_plain": (broker.sasl_ssl_port, ClientSecurity.from_config(broker.plain("carol"))),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}

    async def run() -> None:
        for _ in range(count):  # interleaved, as the throughput rounds
            for name, (port, security) in cases.items():
                start = time.perf_counter()
                conn = await Connection.open("127.0.0.1", port, security=security)
                times[name].append((time.perf_counter() - start) * 1000)
                await conn.close()

    asyncio.run(run())
    return {name: round(median(values), 2) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller run, under 60 s")
    parser.add_argument("--records", type=int, help="records per round")
    parser.add_argument("--rounds", type=int, help="rounds (each runs every contender once)")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    records = args.records or preset["records"]
    rounds = args.rounds or preset["rounds"]
    payload = (os.urandom(RECORD_BYTES // 2).hex().encode())[:RECORD_BYTES]
    import tempfile

    tmp = tempfile.TemporaryDirectory(prefix="onceflow-bench-security-")
    secure = SecureBroker(
        Path(tmp.name) / "secure", extra={"connection.failed.authentication.delay.ms": "100"}
    )
    plain = BrokerProcess(Path(tmp.name) / "plain")
    null = NullBrokerProcess(free_port(), free_port(), secure.pki.server_keystore, secure.pki.ca)
    try:
        secure.start()
        plain.start()
        null.start()
        progress(
            f"secured broker pid {secure.pid} (PLAINTEXT :{secure.plain_port}, SASL_SSL :{secure.sasl_ssl_port}); "
            f"plain broker pid {plain.pid}; null broker pid {null.pid}"
        )
        grant(secure)
        brokers = {
            "plaintext": secure,
            "sasl_ssl": secure,
            "plaintext_no_authorizer": plain,
            "null_plaintext": null,
            "null_ssl": null,
        }
        admin = {
            "plaintext": secure.scram(),
            "sasl_ssl": secure.scram(),
            "plaintext_no_authorizer": {"bootstrap.servers": plain.bootstrap},
            "null_plaintext": None,
            "null_ssl": None,
        }
        samples = {
            name: {
                phase: {"rate": [], "broker_cpu_s_per_gb": [], "client_cpu_s_per_gb": []} for phase in PHASES
            }
            for name in CONTENDERS
        }
        for round_no in range(1, rounds + 1):
            progress(f"round {round_no}/{rounds}: {records:,} records of {RECORD_BYTES} bytes")
            for name in CONTENDERS:
                run_round(
                    name, brokers[name], settings(brokers[name], name), admin[name], records, payload, samples
                )
        setup = connection_setup_ms(secure, preset["connections"])
        progress(f"connection set-up (ms, median): {setup}")
    finally:
        secure.stop()
        plain.stop()
        null.stop()
        kill_all()
        tmp.cleanup()
    results, cpu = {}, {"client": {}}
    for name in CONTENDERS:
        cpu[name], cpu["client"][name] = {}, {}
        for phase in ("produce",) if name in NULL_CONTENDERS else PHASES:
            results[f"{name}.{phase}"] = round(median(samples[name][phase]["rate"]))
            cpu[name][phase] = round(median(samples[name][phase]["broker_cpu_s_per_gb"]), 2)
            cpu["client"][name][phase] = round(median(samples[name][phase]["client_cpu_s_per_gb"]), 2)
    ratios = {}
    for phase in PHASES:
        ratios[f"{phase} sasl_ssl/plaintext"] = round(
            results[f"sasl_ssl.{phase}"] / results[f"plaintext.{phase}"], 3
        )
        ratios[f"{phase} plaintext/plaintext_no_authorizer"] = round(
            results[f"plaintext.{phase}"] / results[f"plaintext_no_authorizer.{phase}"], 3
        )
    ratios["produce null_ssl/null_plaintext (bound)"] = round(
        results["null_ssl.produce"] / results["null_plaintext.produce"], 3
    )
    emit(
        {
            "bench": "security",
            "unit": "records/s",
            "results": results,
            "ratios": ratios,
            "cpu_s_per_gb": cpu,
            "connection_setup_ms": setup,
            "params": {
                "records": records,
                "record_bytes": RECORD_BYTES,
                "rounds": rounds,
                "quick": args.quick,
                "client": "confluent-kafka (librdkafka)",
                "sasl_mechanism": "SCRAM-SHA-512",
                "scram_iterations": 4096,
                "authorizer": "StandardAuthorizer on the secured broker (both of its listeners)",
                "null_broker": "bench/null_broker.py: onceflow's connection code, no storage; SSL without SASL",
                "acks": "all",
                "linger_ms": 5,
                "batch_size": 1 << 20,
                "connections_timed": preset["connections"],
                "cpus": os.cpu_count(),
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
