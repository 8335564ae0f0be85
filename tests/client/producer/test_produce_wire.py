"""The hand-built Produce request and the hand-read response, byte for byte against kafka-python
(an independent encoder/decoder) for every version the producer may send."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from onceflow.client.producer.produce_wire import MAX_VERSION, MIN_VERSION, ProduceRequestFrame
from onceflow.protocol.errors import ErrorCode, KafkaError

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
BATCHES = [
    ("orders", 0, b"\x01" * 70),
    ("orders", 3, b"\x02" * 300),
    ("events-\u00e9", 1, bytearray(b"\x03" * 5)),
]


def kafka_python_request(version, transactional_id, acks, batches, correlation_id, client_id) -> bytes:
    topics: dict[str, list] = {}
    for topic, partition, records in batches:
        topics.setdefault(topic, []).append(
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=bytes(records))
        )
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=p) for t, p in topics.items()],
    )
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "txn-\u00fc-1"])
def test_request_bytes_equal_kafka_python(version, transactional_id):
    frame = ProduceRequestFrame(version, transactional_id, -1, 30_000, BATCHES)
    ours = frame.encode(correlation_id=70_000, client_id="onceflow-producer")
    assert ours == kafka_python_request(version, transactional_id, -1, BATCHES, 70_000, "onceflow-producer")


def test_request_with_a_long_batch_and_null_client_id_uses_multi_byte_lengths():
    batches = [("t", 0, b"\x07" * 20_000)]
    ours = ProduceRequestFrame(12, None, 1, 5_000, batches).encode(correlation_id=3, client_id=None)
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=5_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batches[0][2])
                ],
            )
        ],
    )
    request.API_VERSION = 12
    request.with_header(correlation_id=3, client_id=None)
    assert ours == bytes(request.encode(header=True, framed=True))


def test_acks_zero_expects_no_response():
    assert not ProduceRequestFrame(9, None, 0, 1, BATCHES).expect_response()
    assert ProduceRequestFrame(9, None, -1, 1, BATCHES).expect_response()


def test_versions_outside_the_hand_written_range_are_refused():
    with pytest.raises(ValueError):
        ProduceRequestFrame(13, None, -1, 1, BATCHES)
    with pytest.raises(ValueError):
        ProduceRequestFrame(2, None, -1, 1, BATCHES)


def kafka_python_response(version: int, correlation_id: int) -> bytes:
    P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    partitions = [
        P(index=0, error_code=0, base_offset=1 << 40, log_append_time_ms=1_700_000_000_123, log_start_offset=5,
          record_errors=[], error_message=None),
        P(index=3, error_code=ErrorCode.INVALID_RECORD, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
          record_errors=[P.BatchIndexAndErrorMessage(batch_index=2, batch_index_error_message="bad \u00e9"),
                         P.BatchIndexAndErrorMessage(batch_index=4, batch_index_error_message=None)],
          error_message="one record was invalid"),
    ]  # fmt: skip
    if version >= 10:
        partitions[1].current_leader = P.LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
    response = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(name="orders", partition_responses=partitions),
            ProduceResponse.TopicProduceResponse(
                name="events-\u00e9",
                partition_responses=[
                    P(
                        index=1,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[],
                        error_message=None,
                    )
                ],  # fmt: skip
            ),
        ],
        throttle_time_ms=17,
    )
    if version >= 10:
        response.node_endpoints = [
            ProduceResponse.NodeEndpoint(node_id=2, host="127.0.0.1", port=9093, rack=None)
        ]
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True))


@pytest.mark.parametrize("version", VERSIONS)
def test_response_fields_read_as_kafka_python_wrote_them(version):
    frame = ProduceRequestFrame(version, None, -1, 1, BATCHES)
    results = frame.decode_response(kafka_python_response(version, 12))
    message = "one record was invalid" if version >= 8 else None
    assert [tuple(r) for r in results] == [
        ("orders", 0, 0, 1 << 40, 1_700_000_000_123, None),
        ("orders", 3, ErrorCode.INVALID_RECORD, -1, -1, message),
        ("events-\u00e9", 1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, None),
    ]


@pytest.mark.parametrize("version", [8, 12])
def test_truncated_response_is_corrupt_message(version):
    data = kafka_python_response(version, 1)
    frame = ProduceRequestFrame(version, None, -1, 1, BATCHES)
    with pytest.raises(KafkaError) as info:
        frame.decode_response(data[: len(data) // 2])
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
