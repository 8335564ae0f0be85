"""Wire helpers for the idempotence tests: explicit producer id / epoch / sequence over one socket.

Batches are built by ``onceflow.protocol.record_codec.encode_batch`` with the producer fields a test
chooses, so the broker's own answer (offset or error code) is what the test sees.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.admin import CreateTopicsRequest, DescribeProducersRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest, ProduceResponse
from tests.helpers.wire import WireClient, encode_request

from onceflow.protocol.record_codec import decode_batches, encode_batch

PRODUCE_VERSION = 9
FETCH_VERSION = 12


@dataclass(frozen=True)
class Ack:
    error_code: int
    base_offset: int


def create_topic(
    client: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=-1,
        assignments=[],
        configs=[
            CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
            for k, v in (configs or {}).items()
        ],
    )
    response = client.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000, validate_only=False), 5)
    assert response.topics[0].error_code == 0, response


def init_producer_id(client: WireClient, version: int = 4, transactional_id: str | None = None):
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    return client.request(request, version)


def batch(values: list[bytes], pid: int, epoch: int, first_seq: int) -> bytes:
    return encode_batch(
        [(None, value) for value in values], producer_id=pid, producer_epoch=epoch, base_sequence=first_seq
    )


def produce_request(topic: str, records: bytes, partition: int = 0) -> ProduceRequest:
    data = ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )


def produce(client: WireClient, topic: str, records: bytes, partition: int = 0) -> Ack:
    response = client.request(produce_request(topic, records, partition), PRODUCE_VERSION)
    answer = response.responses[0].partition_responses[0]
    return Ack(answer.error_code, answer.base_offset)


def send_without_reading(client: WireClient, topic: str, records: bytes, correlation_id: int) -> None:
    """Put a Produce request on the wire and leave its response unread (a request "in flight")."""
    client.send_raw(encode_request(produce_request(topic, records), PRODUCE_VERSION, correlation_id))


def read_produce_response(client: WireClient) -> tuple[int, Ack]:
    """The next Produce response on the connection: (correlation id, ack)."""
    frame = client.recv_frame()
    decoded = ProduceResponse.decode(frame, version=PRODUCE_VERSION, header=True)
    answer = decoded.responses[0].partition_responses[0]
    return decoded.header.correlation_id, Ack(answer.error_code, answer.base_offset)


def fetch_values(client: WireClient, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record of the partition as ``(offset, value)``, read from offset 0 on."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        fetch_partition = FetchRequest.FetchTopic.FetchPartition(
            partition=partition,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=4 << 20,
        )
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=8 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[fetch_partition])],
            forgotten_topics_data=[],
            rack_id="",
        )
        answer = client.request(request, FETCH_VERSION).responses[0].partitions[0]
        assert answer.error_code == 0, answer
        records = bytes(answer.records or b"")
        if not records:
            return out
        before = len(out)
        for decoded in decode_batches(records):
            out.extend((r.offset, r.value) for r in decoded.records if r.offset >= offset)
        if len(out) == before:
            return out
        offset = out[-1][0] + 1


def describe_producers(client: WireClient, topic: str, partitions: list[int]):
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=partitions)]
    )
    return client.request(request, 0).topics[0].partitions
