"""A broker that stores nothing: the bound for bench/security.py's SASL_SSL/PLAINTEXT produce ratio.

    python bench/null_broker.py --plain-port P --ssl-port Q --keystore server-keystore.pem

It serves just enough of Kafka for a confluent-kafka producer (ApiVersions, Metadata, Produce), on a
PLAINTEXT and an SSL listener at once, with onceflow's own connection code (``ClientProtocol`` and its
buffered reads, TLS from the same ``server_context`` on uvloop where installed, as the broker) but no
log, no replication, no authorizer: every Produce is answered at once with the next offset. What is
left is what any broker must do per byte (read, decrypt, frame, answer), so the ratio of its TLS and
plaintext throughput, with the same client in the same run, is the most a broker could reach with that
client on that machine: if it stays under the target, so does every broker's.

Prints ``ready`` on stdout once both listeners accept; runs until SIGTERM. ``NullBrokerProcess`` runs it
for a benchmark (bench/security.py).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402

from onceflow.broker.client_protocol import ClientProtocol  # noqa: E402
from onceflow.broker.connection import RequestReceived, SupportedApi  # noqa: E402
from onceflow.broker.handlers import api_versions, metadata, produce  # noqa: E402
from onceflow.broker.memory_pool import MemoryPool  # noqa: E402
from onceflow.broker.security.ssl_context import server_context  # noqa: E402
from onceflow.protocol import apis  # noqa: E402

HOST = "127.0.0.1"
NODE_ID = 0
# Served with the broker's version ranges; ApiVersions lists every API the broker lists, as the client
# picks its message format from them (librdkafka sends record batches only to a broker listing Fetch
# v4+; without it, per-message v1 sets with a CRC32 each, which doubled the client's CPU per GB).
SUPPORTED = {
    h.API_KEY: SupportedApi(h.API_KEY, h.MIN_VERSION, h.MAX_VERSION, h.REQUEST)
    for h in (produce, metadata, api_versions)
}
_Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
_TopicResponse = ProduceResponse.TopicProduceResponse
_PartitionResponse = ProduceResponse.TopicProduceResponse.PartitionProduceResponse


class NullBroker:
    """Answers from nothing: every topic asked for exists with one partition led by this node."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports  # listener name -> port, for Metadata's broker list (each listener its own)
        self.next_offset = 0

    async def dispatch(self, listener: str, event: RequestReceived):
        header, request = event.header, event.request
        if header.api_key == 18:
            response = ApiVersionsResponse(
                error_code=0,
                api_keys=list(api_versions.advertised_versions()),
                throttle_time_ms=0,
            )
        elif header.api_key == 3:
            response = self.metadata(listener, request)
        else:
            response = self.produce(request)
            if response is None:
                return None
        return apis.encode_response(response, header.correlation_id, header.api_version)

    def metadata(self, listener: str, request: MetadataRequest) -> MetadataResponse:
        topics = [
            MetadataResponse.MetadataResponseTopic(
                error_code=0,
                name=t.name,
                is_internal=False,
                partitions=[
                    _Partition(
                        error_code=0,
                        partition_index=0,
                        leader_id=NODE_ID,
                        leader_epoch=0,
                        replica_nodes=[NODE_ID],
                        isr_nodes=[NODE_ID],
                        offline_replicas=[],
                    )
                ],
            )
            for t in request.topics or []
        ]
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=NODE_ID, host=HOST, port=self.ports[listener], rack=None
                )
            ],
            cluster_id="null-broker",
            controller_id=NODE_ID,
            topics=topics,
            error_code=0,
        )

    def produce(self, request: ProduceRequest) -> ProduceResponse | None:
        responses = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                partitions.append(
                    _PartitionResponse(index=data.index, error_code=0, base_offset=self.next_offset)
                )
                self.next_offset += 1
            responses.append(_TopicResponse(name=topic.name, partition_responses=partitions))
        if request.acks == 0:
            return None
        return ProduceResponse(responses=responses, throttle_time_ms=0)


async def serve(plain_port: int, ssl_port: int, keystore: str) -> None:
    loop = asyncio.get_running_loop()
    settings = {"ssl.keystore.location": keystore}
    contexts = {"PLAINTEXT": None, "SSL": server_context(settings.get, "SSL")}
    broker = NullBroker({"PLAINTEXT": plain_port, "SSL": ssl_port})
    pool = MemoryPool(-1)

    def connection(listener: str) -> ClientProtocol:
        return ClientProtocol(
            functools.partial(broker.dispatch, listener),
            SUPPORTED,
            max_request_bytes=100 * 1024 * 1024,
            on_close=lambda _c: None,
            pool=pool,
        )

    servers = [
        await loop.create_server(
            functools.partial(connection, name), HOST, port, reuse_address=True, ssl=contexts[name]
        )
        for name, port in (("PLAINTEXT", plain_port), ("SSL", ssl_port))
    ]
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


class NullBrokerProcess:
    """This script as a subprocess on two loopback ports; ``pid`` for its CPU time, ``ca`` (the CA that
    signed the keystore's certificate) for its clients."""

    def __init__(self, plain_port: int, ssl_port: int, keystore: Path, ca: Path) -> None:
        self.plain_port, self.ssl_port, self.keystore, self.ca = plain_port, ssl_port, keystore, ca
        self._process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--plain-port",
                str(self.plain_port),
                "--ssl-port",
                str(self.ssl_port),
                "--keystore",
                str(self.keystore),
            ],
            stdout=subprocess.PIPE,
        )
        line = self._process.stdout.readline()  # type: ignore[union-attr]
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"null broker did not start (said {line!r})")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plain-port", type=int, required=True)
    parser.add_argument("--ssl-port", type=int, required=True)
    parser.add_argument("--keystore", required=True, help="the server's key and certificate chain (PEM)")
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.plain_port, args.ssl_port, args.keystore))
    else:
        uvloop.run(serve(args.plain_port, args.ssl_port, args.keystore))


if __name__ == "__main__":
    main()
